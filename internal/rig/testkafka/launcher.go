package testkafka

// The launcher vocabulary shared with internal/rig/broker (broker.Launcher,
// broker.Nodes), so a soak written against it runs on the embedded broker
// or on this real cluster.

import (
	"context"
	"fmt"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	_ broker.Launcher = (*Cluster)(nil)
	_ broker.Nodes    = (*Cluster)(nil)
)

// NewClient returns a new client for the cluster with broker.Cluster's
// test defaults: the seed brokers, a metadata minimum age of 100ms and
// retries that give up after 10s. opts come after the defaults and may
// override them (a soak that rides out broker kills sets its own retry
// bounds). The caller closes the client.
func (c *Cluster) NewClient(opts ...kgo.Opt) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(c.Addrs()...),
		kgo.MetadataMinAge(100 * time.Millisecond),
		kgo.RetryTimeout(10 * time.Second),
	}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("testkafka: new client: %w", err)
	}
	return cl, nil
}

// CreateTopics creates the topics, replicated as the brokers default to
// (every node, Config.Nodes up to three), and returns once every partition
// of each has a leader. An error names the topic that failed.
func (c *Cluster) CreateTopics(ctx context.Context, ts ...broker.Topic) error {
	cl, err := c.NewClient()
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	for _, t := range ts {
		if t.Name == "" {
			return fmt.Errorf("testkafka: create topic: empty name")
		}
		parts := max(t.Partitions, 1)
		resp, err := adm.CreateTopic(ctx, parts, -1, t.Configs, t.Name)
		if err == nil {
			err = resp.Err
		}
		if err == nil {
			err = waitLeaders(ctx, adm, t.Name, parts)
		}
		if err != nil {
			return fmt.Errorf("testkafka: create topic %q: %w", t.Name, err)
		}
	}
	return nil
}

// waitLeaders returns once the metadata shows topic with parts partitions,
// each with a leader, or ctx's error.
func waitLeaders(ctx context.Context, adm *kadm.Client, topic string, parts int32) error {
	for {
		md, err := adm.Metadata(ctx, topic)
		if err == nil {
			td := md.Topics[topic]
			ok := td.Err == nil && int32(len(td.Partitions)) == parts
			for _, p := range td.Partitions {
				ok = ok && p.Err == nil && p.Leader >= 0
			}
			if ok {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("partitions without a leader: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
