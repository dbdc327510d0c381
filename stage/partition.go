package stage

// Partitioning: Kafka's murmur2 key hash for emissions, and the
// co-partitioning group balancer.

import (
	"sort"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// murmur2 is Kafka's key hash (org.apache.kafka.common.utils.Utils.murmur2).
func murmur2(data []byte) int32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	n := len(data)
	h := seed ^ uint32(n)
	for i := 0; i+4 <= n; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := n &^ 3
	switch n & 3 {
	case 3:
		h ^= uint32(data[tail+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[tail+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[tail])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// partitionFor chooses the partition of an emission, deterministically so a
// replayed step sends every record where the first attempt did: a keyed
// record goes where Kafka's default partitioner sends it (murmur2 of the
// encoded key, positive, modulo the partition count), so plain Java and
// franz-go producers agree; a nil-keyed record goes to the task's partition
// modulo the sink's partition count.
func partitionFor(key []byte, nilKey bool, partitions, task int32) int32 {
	if nilKey {
		return task % partitions
	}
	return (murmur2(key) & 0x7fffffff) % partitions
}

// coPartitioner is the group balancer of a stage application: partition p
// of every topic the group consumes goes to the same member, so a task
// (stage, p) sees partition p of each of its sources. Partition numbers are
// dealt round-robin over the members in the order the coordinator lists
// them (instance ID, then member ID). It is an eager protocol: every
// rebalance revokes everything, which the transactional session turns into
// an abort of any open step.
type coPartitioner struct{}

func (coPartitioner) ProtocolName() string { return "parsley-copartitioned" }
func (coPartitioner) IsCooperative() bool  { return false }

func (coPartitioner) JoinGroupMetadata(topics []string, _ map[string][]int32, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = topics
	meta.Generation = generation
	return meta.AppendTo(nil)
}

func (coPartitioner) ParseSyncAssignment(b []byte) (map[string][]int32, error) {
	return kgo.ParseConsumerSyncAssignment(b)
}

func (c coPartitioner) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	b, err := kgo.NewConsumerBalancer(c, members)
	if err != nil {
		return nil, nil, err
	}
	return b, b.MemberTopics(), nil
}

func (coPartitioner) Balance(b *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	plan := b.NewPlan()
	members := b.Members()
	if len(members) == 0 {
		return plan
	}
	interested := make([]map[string]bool, len(members))
	b.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		for i := range members {
			if members[i].MemberID == m.MemberID {
				interested[i] = make(map[string]bool, len(meta.Topics))
				for _, t := range meta.Topics {
					interested[i][t] = true
				}
			}
		}
	})
	names := make([]string, 0, len(topics))
	var most int32
	for t, n := range topics {
		names = append(names, t)
		most = max(most, n)
	}
	sort.Strings(names)
	for p := range most {
		for _, t := range names {
			if p >= topics[t] {
				continue
			}
			// The member for p, or the next one interested in t (members
			// of another application version may not consume t).
			for j := range len(members) {
				i := (int(p) + j) % len(members)
				if interested[i][t] {
					plan.AddPartition(&members[i], t, p)
					break
				}
			}
		}
	}
	return plan
}
