// Package broker runs an in-process Kafka cluster for tests and examples.
//
// It wraps franz-go's kfake, a fake cluster that speaks the real wire
// protocol — topic IDs, idempotent and transactional producers,
// read_committed fetches, control records, DeleteTopics and DeleteRecords —
// so every integration test in this module runs with `go test` alone: no
// Docker, no network beyond loopback.
//
// Start gives a cluster, a *kgo.Client and a *kadm.Client wired to it;
// New does the same for a test and closes everything when the test ends.
// Against a real cluster nothing changes but the seed brokers, so code under
// test should take its clients from here rather than build them itself.
//
// When PARSLEY_TEST_BROKERS names a real cluster (see EnvBrokers), Start
// and New use it instead of kfake, so the same integration tests run
// against Apache Kafka (the real-Kafka tier of .ci/run starts one with
// internal/rig/testkafka). Tests that need kfake's hooks call KfakeOnly.
package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Topic describes a topic to create.
type Topic struct {
	Name       string
	Partitions int32              // ≤ 0 means 1
	Configs    map[string]*string // topic configs, e.g. "cleanup.policy"
}

type config struct {
	brokers    int
	topics     []Topic
	clientOpts []kgo.Opt
	fakeOpts   []kfake.Opt
}

// Option configures Start and New.
type Option func(*config)

// Brokers sets the number of brokers in the cluster (default 1). A real
// cluster has the brokers it has; this option only shapes kfake.
func Brokers(n int) Option { return func(c *config) { c.brokers = n } }

// Topics creates topics once the cluster is up.
func Topics(ts ...Topic) Option { return func(c *config) { c.topics = append(c.topics, ts...) } }

// ClientOpts adds options to the client Start builds, after the defaults
// (see NewClient), so they can override them.
func ClientOpts(opts ...kgo.Opt) Option {
	return func(c *config) { c.clientOpts = append(c.clientOpts, opts...) }
}

// FakeOpts passes options straight to kfake, for behaviour this package
// does not name (faults, persistence, ACLs). A real cluster ignores them;
// the one internal/rig/testkafka starts already allows group session timeouts
// down to 100ms, the one kfake option the tests commonly set.
func FakeOpts(opts ...kfake.Opt) Option {
	return func(c *config) { c.fakeOpts = append(c.fakeOpts, opts...) }
}

// Cluster is a running in-process cluster, or the lease on a real one, and
// a client for it.
type Cluster struct {
	fake    *kfake.Cluster // nil on a real cluster
	release func()         // ends the lease on a real cluster
	addrs   []string
	client  *kgo.Client
	admin   *kadm.Client
	opts    []kgo.Opt
	close   sync.Once
}

// Start starts a cluster, creates the requested topics and returns the
// cluster with a connected client. Close it when done.
func Start(ctx context.Context, opts ...Option) (*Cluster, error) {
	cfg := config{brokers: 1}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.brokers < 1 {
		return nil, fmt.Errorf("broker: %d brokers requested; need at least one", cfg.brokers)
	}
	if addrs := realBrokers(); addrs != nil {
		return startReal(ctx, cfg, addrs)
	}
	fake, err := kfake.NewCluster(append([]kfake.Opt{
		kfake.NumBrokers(cfg.brokers),
		kfake.DefaultNumPartitions(1),
	}, cfg.fakeOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("broker: start kfake: %w", err)
	}
	c := &Cluster{fake: fake, addrs: fake.ListenAddrs(), opts: cfg.clientOpts}
	c.client, err = c.NewClient(cfg.clientOpts...)
	if err != nil {
		fake.Close()
		return nil, err
	}
	c.admin = kadm.NewClient(c.client)
	if err := c.CreateTopics(ctx, cfg.topics...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// TB is the part of testing.TB that New uses. It is spelled out so that
// programs (the observer's demo, examples) can import this package without
// importing testing.
type TB interface {
	Helper()
	Fatal(args ...any)
	Cleanup(func())
}

// New starts a cluster for t and closes it when t ends. It stops the test
// if the cluster cannot start.
func New(t TB, opts ...Option) *Cluster {
	t.Helper()
	wait := 30 * time.Second
	if Real() {
		wait = realLeaseWait
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	c, err := Start(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Addrs returns the brokers' listen addresses, usable as seed brokers.
func (c *Cluster) Addrs() []string { return append([]string(nil), c.addrs...) }

// Client returns the cluster's shared client. Close closes it.
func (c *Cluster) Client() *kgo.Client { return c.client }

// Admin returns an admin client over Client.
func (c *Cluster) Admin() *kadm.Client { return c.admin }

// Fake returns the underlying kfake cluster, for fault injection and
// control hooks, or nil on a real cluster (see KfakeOnly).
func (c *Cluster) Fake() *kfake.Cluster { return c.fake }

// NewClient returns a new client for the cluster. The defaults suit tests:
// the seed brokers, a metadata minimum age of 100ms (franz-go's default of
// 5s would make a test that deletes and recreates a topic wait), and
// retries that give up after 10s rather than hang a test. opts come after
// the defaults and may override them. The caller closes the client.
func (c *Cluster) NewClient(opts ...kgo.Opt) (*kgo.Client, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{
		kgo.SeedBrokers(c.addrs...),
		kgo.MetadataMinAge(100 * time.Millisecond),
		kgo.RetryTimeout(10 * time.Second),
	}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("broker: new client: %w", err)
	}
	return cl, nil
}

// CreateTopics creates the topics and returns once each exists. An error
// names the topic that failed.
func (c *Cluster) CreateTopics(ctx context.Context, ts ...Topic) error {
	for _, t := range ts {
		if t.Name == "" {
			return errors.New("broker: create topic: empty name")
		}
		parts := t.Partitions
		if parts <= 0 {
			parts = 1
		}
		// A real cluster replicates as its brokers default to (-1), so a
		// three-broker cluster exercises replication.
		rf := int16(1)
		if c.fake == nil {
			rf = -1
		}
		resp, err := c.admin.CreateTopic(ctx, parts, rf, t.Configs, t.Name)
		if err == nil {
			err = resp.Err
		}
		if err == nil && c.fake == nil {
			err = c.waitTopics(ctx, []string{t.Name}, topicReady(resp.ID, parts))
		}
		if err != nil {
			return fmt.Errorf("broker: create topic %q: %w", t.Name, err)
		}
	}
	return nil
}

// DeleteTopics deletes the named topics. An error names the topic that
// failed.
func (c *Cluster) DeleteTopics(ctx context.Context, names ...string) error {
	resps, err := c.admin.DeleteTopics(ctx, names...)
	if err != nil {
		return fmt.Errorf("broker: delete topics %q: %w", names, err)
	}
	for _, name := range names {
		r, ok := resps[name]
		if !ok {
			return fmt.Errorf("broker: delete topic %q: no response", name)
		}
		if r.Err != nil {
			return fmt.Errorf("broker: delete topic %q: %w", name, r.Err)
		}
	}
	if c.fake == nil {
		if err := c.waitTopics(ctx, names, topicGone); err != nil {
			return fmt.Errorf("broker: delete topics %q: %w", names, err)
		}
	}
	return nil
}

// TopicID returns the current ID of the named topic, straight from the
// brokers (bypassing the client's metadata cache).
func (c *Cluster) TopicID(ctx context.Context, name string) ([16]byte, error) {
	md, err := c.admin.Metadata(kadm.WithAuthorizedOps(ctx), name)
	if err != nil {
		return [16]byte{}, fmt.Errorf("broker: metadata for topic %q: %w", name, err)
	}
	td, ok := md.Topics[name]
	if !ok {
		return [16]byte{}, fmt.Errorf("broker: topic %q missing from metadata", name)
	}
	if td.Err != nil {
		return [16]byte{}, fmt.Errorf("broker: topic %q: %w", name, td.Err)
	}
	return td.ID, nil
}

// Close closes the client and stops the cluster, or ends the lease on a
// real one. It is safe to call more than once, and returns nil: kfake and
// the lease have nothing to report.
func (c *Cluster) Close() error {
	c.close.Do(func() {
		if c.client != nil {
			c.client.Close()
		}
		if c.fake != nil {
			c.fake.Close()
		}
		if c.release != nil {
			c.release()
		}
	})
	return nil
}
