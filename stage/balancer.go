package stage

// The group balancer: co-partitioned, sticky and cooperative.

import (
	"cmp"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// coPartitioner is the group balancer of a stage application. The unit it
// assigns is a partition number: partition p of every topic the group
// consumes goes to one member, or to none, so a task (stage, p) sees
// partition p of each of its sources and no two members ever hold pieces
// of one task. A member gets the topics at p it subscribes to; during a
// rolling upgrade that changes a stage's sources, a topic only the other
// version reads stays unassigned at the partitions the old version holds.
//
// It is sticky: a partition number stays with its owner while the owner's
// share allows, so a member joining moves only its share to it. It is
// cooperative (KIP-429): a partition number changes owner in two
// rebalances — the first takes it from every member that holds any of its
// partitions, and gives it to no one; those members revoke (their open
// step aborts, or commits first under the exactly-once rules) and rejoin;
// the second gives it to the new owner. Tasks at other partition numbers
// keep processing throughout.
//
// Standby placement rides along (standby.go): a member's join reports the
// standby copies it keeps, the plan prefers a warm member for a partition
// number that lost its owner, and each member's assignment carries its
// standby partition numbers. host is this member's side of that, nil in
// tests of the plan alone.
type coPartitioner struct{ host *standbyHost }

// The eager predecessor was "parsley-copartitioned". A group cannot mix
// eager and cooperative members of one protocol name, so the cooperative
// balancer has its own.
func (coPartitioner) ProtocolName() string { return "parsley-copartitioned-coop" }
func (coPartitioner) IsCooperative() bool  { return true }

func (c coPartitioner) JoinGroupMetadata(topics []string, owned map[string][]int32, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = topics
	meta.Generation = generation
	meta.UserData = c.host.joinUserData()
	for _, t := range slices.Sorted(maps.Keys(owned)) {
		o := kmsg.NewConsumerMemberMetadataOwnedPartition()
		o.Topic = t
		o.Partitions = slices.Sorted(slices.Values(owned[t]))
		meta.OwnedPartitions = append(meta.OwnedPartitions, o)
	}
	return meta.AppendTo(nil)
}

func (c coPartitioner) ParseSyncAssignment(b []byte) (map[string][]int32, error) {
	return c.host.parseAssignment(b)
}

func (c coPartitioner) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	b, err := kgo.NewConsumerBalancer(c, members)
	if err != nil {
		return nil, nil, err
	}
	return b, b.MemberTopics(), nil
}

func (coPartitioner) Balance(b *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	var views []memberView
	var refs []*kmsg.JoinGroupResponseMember
	b.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		v := memberView{id: m.MemberID, topics: make(map[string]bool, len(meta.Topics)), owned: make(map[string][]int32), generation: meta.Generation}
		if m.InstanceID != nil {
			v.instance = *m.InstanceID
		}
		for _, t := range meta.Topics {
			v.topics[t] = true
		}
		for _, o := range meta.OwnedPartitions {
			v.owned[o.Topic] = append(v.owned[o.Topic], o.Partitions...)
		}
		v.standbys, v.warm = readJoinUserData(meta.UserData)
		views = append(views, v)
		refs = append(refs, m)
	})
	assigned, owner, claimants := planOwners(views, topics)
	return syncAssignments(refs, assigned, planStandbys(views, owner, claimants))
}

// rankMembers returns the indexes of members ranked by instance ID, then
// member ID, so every leader computes the same plan from the same join.
func rankMembers(members []memberView) []int {
	rank := make([]int, len(members))
	for i := range rank {
		rank[i] = i
	}
	slices.SortFunc(rank, func(x, y int) int {
		return cmp.Or(cmp.Compare(members[x].instance, members[y].instance), cmp.Compare(members[x].id, members[y].id))
	})
	return rank
}

// memberView is what the balancer reads of one member's join.
type memberView struct {
	id, instance string
	topics       map[string]bool    // the topics it subscribes to
	owned        map[string][]int32 // what it holds now
	generation   int32              // the generation of that holding
	standbys     int                // the Config.Standbys it runs with (standby.go)
	warm         map[int32]bool     // the partition numbers it keeps standby copies of
}

// planOwners assigns partition numbers to members and returns, per member
// in the order given, the topic partitions it gets this round. Members are
// ranked by instance ID, then member ID, so every leader computes the same
// plan from the same join. It also returns, per partition number, its
// planned owner (an index into members) and the members holding any of
// its partitions now, for standby placement (standby.go).
func planOwners(members []memberView, topics map[string]int32) (out []map[string][]int32, owner []int, claimants [][]int) {
	out = make([]map[string][]int32, len(members))
	for i := range out {
		out[i] = make(map[string][]int32)
	}
	n := len(members)
	if n == 0 {
		return out, nil, nil
	}
	rank := rankMembers(members)
	var parts int32
	for _, c := range topics {
		parts = max(parts, c)
	}
	// Who holds partition p now: every member holding any topic at p, and
	// the one with the newest holding, which keeps p if its share allows.
	claimants = make([][]int, parts)
	current := make([]int, parts)
	for p := range current {
		current[p] = -1
	}
	for _, i := range rank {
		m := members[i]
		for t, ps := range m.owned {
			for _, p := range ps {
				if p < 0 || p >= parts || p >= topics[t] || slices.Contains(claimants[p], i) {
					continue
				}
				claimants[p] = append(claimants[p], i)
				if c := current[p]; c < 0 || m.generation > members[c].generation {
					current[p] = i
				}
			}
		}
	}
	// Shares: every member base numbers, extra of them one more.
	base, extra := int(parts)/n, int(parts)%n
	owner = make([]int, parts)
	count := make([]int, n)
	for p := range owner {
		owner[p] = -1
		if c := current[p]; c >= 0 && count[c] < base {
			owner[p] = c
			count[c]++
		}
	}
	for p := range owner {
		if c := current[p]; owner[p] < 0 && c >= 0 && count[c] == base && extra > 0 {
			owner[p] = c
			count[c]++
			extra--
		}
	}
	extra = ownWarm(members, rank, owner, count, base, extra) // standby.go
	for p := range owner {
		if owner[p] >= 0 {
			continue
		}
		best := -1
		for _, i := range rank {
			if count[i] < base || count[i] == base && extra > 0 {
				if best < 0 || count[i] < count[best] {
					best = i
				}
			}
		}
		if count[best] == base {
			extra--
		}
		owner[p] = best
		count[best]++
	}
	names := slices.Sorted(maps.Keys(topics))
	for p, o := range owner {
		// Taken from another member: nobody gets p until it has revoked.
		if slices.ContainsFunc(claimants[p], func(c int) bool { return c != o }) {
			continue
		}
		for _, t := range names {
			if int32(p) < topics[t] && members[o].topics[t] {
				out[o][t] = append(out[o][t], int32(p))
			}
		}
	}
	return out, owner, claimants
}
