package stage

// What the running host asks of the brokers besides its session.

import (
	"context"
	"log/slog"
	"maps"
	"slices"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/state"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// cluster is what the running host asks of the brokers outside its group
// session: offsets (start positions, the protocol's broker offsets, data
// loss checks), the changelogs that restores and standbys read, the stable
// offset read behind the anchor, fencing a departed owner and leaving the
// group. kafkaCluster asks the brokers; the host simulator answers from
// its model of a cluster (hostsim_test.go). Every method may be called on
// any goroutine.
type cluster interface {
	FetchOffsets(ctx context.Context, group string) (kadm.OffsetResponses, error)
	ListStartOffsets(ctx context.Context, topics ...string) (kadm.ListedOffsets, error)
	ListEndOffsets(ctx context.Context, topics ...string) (kadm.ListedOffsets, error)
	Metadata(ctx context.Context, topics ...string) (kadm.Metadata, error)
	// uncommitted reads, with RequireStable, whether the group has no
	// commit, committed or pending, for each partition in need.
	uncommitted(ctx context.Context, group string, need map[string][]int32) (map[topicPartition]bool, error)
	// changelog returns the source a restore or a standby reads partition
	// p of a changelog from.
	changelog(topic string, p int32) state.Source
	// fenceAbandoned ends the transactions that departed previous owners
	// of the partitions added left open (fence.go).
	fenceAbandoned(ctx context.Context, added map[string][]int32)
	// leaveGroup removes a static member from the group.
	leaveGroup(ctx context.Context, group, instance string) error
	// moveLegacy moves a store of the earlier layout (storepath.go).
	moveLegacy(ctx context.Context, changelog, legacy, path string) (bool, error)
}

// kafkaCluster is the cluster of real brokers: an admin client and its
// underlying client for the requests kadm lacks.
type kafkaCluster struct {
	*kadm.Client
	boot      *kgo.Client
	newClient func(...kgo.Opt) (*kgo.Client, error)
	topics    map[string]topicMeta
	names     map[headers.TopicID]string

	// For fencing (fence.go).
	appID, instance string
	bySource        map[string][]int
	stages          []*Stage
	log             *slog.Logger
}

func (c *kafkaCluster) changelog(topic string, p int32) state.Source {
	return state.KafkaSource(c.Client, c.newClient, topic, p)
}

func (c *kafkaCluster) leaveGroup(ctx context.Context, group, instance string) error {
	res, err := c.LeaveGroup(ctx, kadm.LeaveGroup(group).InstanceIDs(instance))
	if err == nil {
		err = res.Error()
	}
	return err
}

func (c *kafkaCluster) moveLegacy(ctx context.Context, changelog, legacy, path string) (bool, error) {
	return state.MoveLegacy(ctx, c.Client, changelog, legacy, path)
}

func (c *kafkaCluster) uncommitted(ctx context.Context, group string, need map[string][]int32) (map[topicPartition]bool, error) {
	found := make(map[topicPartition]bool)
	req := kmsg.NewPtrOffsetFetchRequest()
	req.RequireStable = true
	g := kmsg.NewOffsetFetchRequestGroup()
	g.Group = group
	for _, topic := range slices.Sorted(maps.Keys(need)) {
		rt := kmsg.NewOffsetFetchRequestGroupTopic()
		rt.Topic, rt.TopicID = topic, c.topics[topic].id
		rt.Partitions = need[topic]
		g.Topics = append(g.Topics, rt)
		for _, p := range need[topic] {
			found[topicPartition{topic, p}] = false
		}
	}
	req.Groups = append(req.Groups, g)
	resp, err := req.RequestWith(ctx, c.boot)
	if err != nil {
		return nil, err
	}
	if len(resp.Groups) != 1 || resp.Groups[0].ErrorCode != 0 {
		if len(resp.Groups) == 1 {
			return nil, kerr.ErrorForCode(resp.Groups[0].ErrorCode)
		}
		return nil, kerr.UnknownServerError
	}
	for _, rt := range resp.Groups[0].Topics {
		topic := rt.Topic
		if name, ok := c.names[rt.TopicID]; ok {
			topic = name
		}
		for _, rp := range rt.Partitions {
			tp := topicPartition{topic, rp.Partition}
			if _, asked := found[tp]; asked {
				found[tp] = rp.ErrorCode == 0 && rp.Offset < 0
			}
		}
	}
	return found, nil
}
