package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// EnvBrokers names the environment variable that points the tests at a
// real cluster: a comma-separated list of seed brokers. When it is set,
// Start and New connect to that cluster instead of starting kfake.
//
// The cluster it names is for tests only: every Start takes the lease on
// it (a lock file that excludes other test processes on the machine; see
// acquireLease) and deletes every topic and consumer group on it, so each
// test sees an empty cluster and the fixed topic, group and transactional
// names tests use cannot collide. Tests against one real cluster therefore
// run one at a time, and a second Start within a test (a "new cluster")
// is the same cluster, emptied.
const EnvBrokers = "PARSLEY_TEST_BROKERS"

// realBrokers returns the seed brokers named by EnvBrokers, or nil.
func realBrokers() []string {
	v := strings.TrimSpace(os.Getenv(EnvBrokers))
	if v == "" {
		return nil
	}
	var out []string
	for _, a := range strings.Split(v, ",") {
		if a = strings.TrimSpace(a); a != "" {
			out = append(out, a)
		}
	}
	return out
}

// Real reports whether the tests run against a real cluster (EnvBrokers
// is set) rather than kfake.
func Real() bool { return len(realBrokers()) > 0 }

// Skipper is the part of testing.TB that KfakeOnly uses.
type Skipper interface {
	Helper()
	Skip(args ...any)
}

// KfakeOnly skips t when the tests run against a real cluster. A test calls
// it first when it needs something only kfake offers — a Control hook that
// injects a fault or rewrites a response, forced compaction — and says why;
// docs/testing.md lists every such test.
func KfakeOnly(t Skipper, why string) {
	t.Helper()
	if Real() {
		t.Skip("kfake only: " + why)
	}
}

// Leases can wait a long time: the tests of every package queue for one
// real cluster.
const realLeaseWait = 10 * time.Minute

// startReal connects to the cluster named by EnvBrokers, takes the lease
// and empties the cluster.
func startReal(ctx context.Context, cfg config, addrs []string) (_ *Cluster, err error) {
	release, err := acquireLease(ctx, addrs)
	if err != nil {
		return nil, err
	}
	c := &Cluster{addrs: addrs, opts: cfg.clientOpts, release: release}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	c.client, err = c.NewClient(cfg.clientOpts...)
	if err != nil {
		return nil, err
	}
	c.admin = kadm.NewClient(c.client)
	// A topic the last test created moments ago may not be in the
	// broker's metadata yet, escape the wipe and make the create fail:
	// wipe again.
	for range 5 {
		if err := c.wipe(ctx); err != nil {
			return nil, err
		}
		err = c.CreateTopics(ctx, cfg.topics...)
		if !errors.Is(err, kerr.TopicAlreadyExists) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// wipe deletes every topic and group the cluster holds, except Kafka's
// internal topics, and returns once they are gone.
func (c *Cluster) wipe(ctx context.Context) error {
	topics, err := c.admin.ListTopics(ctx)
	if err != nil {
		return fmt.Errorf("broker: list topics to wipe: %w", err)
	}
	if names := topics.Names(); len(names) > 0 {
		resps, err := c.admin.DeleteTopics(ctx, names...)
		if err != nil {
			return fmt.Errorf("broker: wipe topics %q: %w", names, err)
		}
		for _, r := range resps.Sorted() {
			if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
				return fmt.Errorf("broker: wipe topic %q: %w", r.Topic, r.Err)
			}
		}
		if err := c.waitTopics(ctx, names, topicGone); err != nil {
			return fmt.Errorf("broker: wipe: %w", err)
		}
	}
	for {
		groups, err := c.admin.ListGroups(ctx)
		if err != nil {
			return fmt.Errorf("broker: list groups to wipe: %w", err)
		}
		names := groups.Groups()
		if len(names) == 0 {
			return nil
		}
		resps, err := c.admin.DeleteGroups(ctx, names...)
		if err != nil {
			return fmt.Errorf("broker: wipe groups %q: %w", names, err)
		}
		busy := ""
		for _, r := range resps.Sorted() {
			switch {
			case r.Err == nil, errors.Is(r.Err, kerr.GroupIDNotFound):
			case errors.Is(r.Err, kerr.NonEmptyGroup):
				// The last test's members leave when their clients close;
				// one that crashed on purpose stays until its session
				// times out.
				busy = r.Group
			default:
				return fmt.Errorf("broker: wipe group %q: %w", r.Group, r.Err)
			}
		}
		if busy == "" {
			return nil
		}
		// Static members (KIP-345) do not leave when their clients close:
		// stages keep their tasks across a restart that way. Between tests
		// they are stale, so the wipe removes them by instance ID.
		if err := c.removeStaticMembers(ctx, busy); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("broker: wipe group %q: still has members: %w", busy, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitTopics polls metadata for names until done holds for each.
func (c *Cluster) waitTopics(ctx context.Context, names []string, done func(kadm.TopicDetail) bool) error {
	for {
		md, err := c.admin.Metadata(ctx, names...)
		pending := ""
		if err == nil {
			for _, n := range names {
				if !done(md.Topics[n]) {
					pending = n
					break
				}
			}
			if pending == "" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = fmt.Errorf("topic %q not settled", pending)
			}
			return fmt.Errorf("%w: %w", err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// topicReady reports whether the broker's metadata shows the topic created
// with ID id, every partition led. Kafka's brokers learn of creations and
// deletions after the controller answers, so a test that deletes and
// recreates a topic would otherwise see the old topic, then none, then the
// new one, whatever CreateTopics returned.
func topicReady(id [16]byte, want int32) func(kadm.TopicDetail) bool {
	return func(td kadm.TopicDetail) bool {
		if td.Err != nil || td.ID != id || int32(len(td.Partitions)) != want {
			return false
		}
		return !slices.ContainsFunc(td.Partitions.Sorted(), func(p kadm.PartitionDetail) bool {
			return p.Leader < 0 || p.Err != nil
		})
	}
}

// topicGone reports whether the broker's metadata no longer has the topic.
func topicGone(td kadm.TopicDetail) bool {
	return errors.Is(td.Err, kerr.UnknownTopicOrPartition)
}

// removeStaticMembers removes every member of group that has an instance
// ID, as an operator scaling in would.
func (c *Cluster) removeStaticMembers(ctx context.Context, group string) error {
	described, err := c.admin.DescribeGroups(ctx, group)
	if err != nil {
		return fmt.Errorf("broker: describe group %q to wipe: %w", group, err)
	}
	var ids []string
	for _, m := range described[group].Members {
		if m.InstanceID != nil {
			ids = append(ids, *m.InstanceID)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	resps, err := c.admin.LeaveGroup(ctx, kadm.LeaveGroup(group).InstanceIDs(ids...).Reason("parsley test wipe"))
	if err != nil {
		return fmt.Errorf("broker: remove static members %q of group %q: %w", ids, group, err)
	}
	for _, r := range resps.Sorted() {
		if r.Err != nil && !errors.Is(r.Err, kerr.UnknownMemberID) {
			return fmt.Errorf("broker: remove static member %q of group %q: %w", r.InstanceID, group, r.Err)
		}
	}
	return nil
}
