// Package excluster gives the examples a Kafka cluster: the embedded
// in-process broker by default, or a real cluster when seed brokers are
// given. Either way the examples create the topics they need and talk to
// the cluster through the same franz-go clients.
//
// On a real cluster every name a run uses starts with its run prefix
// (excli.Target), so it never reads or writes a topic it did not make for
// itself; a topic of its own that already exists with other settings
// stops it with a TopicMismatchError; and a run under a generated prefix
// deletes its topics and groups when it ends.
package excluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/parsley-go/parsley/examples/internal/excli"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Topic is a topic an example needs.
type Topic struct {
	Name       string
	Partitions int32
	Compact    bool
}

// ErrTopicMismatch marks a topic that exists with other settings than the
// example needs.
var ErrTopicMismatch = errors.New("topic exists with other settings")

// TopicMismatchError is a topic of the run that already exists, made by
// someone else or an earlier run, with a setting the example cannot use.
type TopicMismatchError struct {
	Topic   string
	Setting string // "partitions" or "cleanup.policy"
	Found   string
	Want    string
}

func (e *TopicMismatchError) Error() string {
	return fmt.Sprintf("topic %q already exists with %s %s, this example needs %s: delete the topic or pass another --prefix",
		e.Topic, e.Setting, e.Found, e.Want)
}

func (e *TopicMismatchError) Unwrap() error { return ErrTopicMismatch }

// Cluster is the cluster an example runs on.
type Cluster struct {
	Addrs    []string
	Embedded bool
	Admin    *kadm.Client
	Target   excli.Target

	out      io.Writer
	created  []string // topics this run created, for Close
	embedded *broker.Cluster
	client   *kgo.Client
}

// Open starts the embedded broker when t.Brokers is empty, or connects to
// the seed brokers, and makes sure every topic exists as asked. Every
// topic's name must start with t.Prefix. Close reports to out.
func Open(ctx context.Context, out io.Writer, t excli.Target, topics ...Topic) (*Cluster, error) {
	for _, tp := range topics {
		if !strings.HasPrefix(tp.Name, t.Prefix) {
			return nil, fmt.Errorf("topic %q is outside the run prefix %q", tp.Name, t.Prefix)
		}
	}
	brokers := t.Brokers
	c := &Cluster{Target: t, out: out}
	if strings.TrimSpace(brokers) == "" {
		b, err := broker.Start(ctx)
		if err != nil {
			return nil, fmt.Errorf("start the embedded broker: %w", err)
		}
		c.embedded, c.Embedded, c.Addrs, c.Admin = b, true, b.Addrs(), b.Admin()
	} else {
		c.Addrs = strings.Split(brokers, ",")
		cl, err := c.NewClient()
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %w", brokers, err)
		}
		// A broker that accepts connections but never answers would
		// otherwise keep the example silent for the client's retries.
		pctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
		err = cl.Ping(pctx)
		cancel()
		if err != nil {
			cl.Close()
			return nil, fmt.Errorf("no Kafka broker at %s answered (waited up to %v): %w", brokers, ConnectTimeout, err)
		}
		c.client, c.Admin = cl, kadm.NewClient(cl)
	}
	for _, tp := range topics {
		configs := map[string]*string{}
		if tp.Compact {
			v := "compact"
			configs["cleanup.policy"] = &v
		}
		resp, err := c.Admin.CreateTopic(ctx, tp.Partitions, -1, configs, tp.Name)
		if err == nil {
			err = resp.Err
		}
		switch {
		case err == nil:
			c.created = append(c.created, tp.Name)
		case errors.Is(err, kerr.TopicAlreadyExists):
			err = c.check(ctx, tp)
		default:
			err = fmt.Errorf("create topic %s: %w", tp.Name, err)
		}
		if err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.visible(ctx, topics); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// visible waits until the cluster's metadata lists every topic: on a real
// cluster a new topic reaches it a moment after it is created, and a stage
// checks its topology once, at its start.
func (c *Cluster) visible(ctx context.Context, topics []Topic) error {
	names := make([]string, len(topics))
	for i, tp := range topics {
		names[i] = tp.Name
	}
	for {
		details, err := c.Admin.ListTopics(ctx, names...)
		if err == nil && !slices.ContainsFunc(names, func(n string) bool {
			return details[n].Err != nil || len(details[n].Partitions) == 0
		}) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("topics %q not visible in the cluster's metadata: %w", names, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// check compares an existing topic with what the example needs.
func (c *Cluster) check(ctx context.Context, tp Topic) error {
	details, err := c.Admin.ListTopics(ctx, tp.Name)
	if err != nil {
		return fmt.Errorf("describe existing topic %s: %w", tp.Name, err)
	}
	d, ok := details[tp.Name]
	if !ok || d.Err != nil {
		return fmt.Errorf("describe existing topic %s: %v", tp.Name, d.Err)
	}
	if n := int32(len(d.Partitions)); n != tp.Partitions {
		return &TopicMismatchError{Topic: tp.Name, Setting: "partitions", Found: fmt.Sprint(n), Want: fmt.Sprint(tp.Partitions)}
	}
	rcs, err := c.Admin.DescribeTopicConfigs(ctx, tp.Name)
	if err != nil {
		return fmt.Errorf("describe existing topic %s's configs: %w", tp.Name, err)
	}
	rc, err := rcs.On(tp.Name, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return fmt.Errorf("describe existing topic %s's configs: %w", tp.Name, err)
	}
	policy := "delete" // Kafka's default
	for _, cfg := range rc.Configs {
		if cfg.Key == "cleanup.policy" && cfg.Value != nil {
			policy = *cfg.Value
		}
	}
	if compacted := strings.Contains(policy, "compact"); compacted != tp.Compact {
		want := "delete"
		if tp.Compact {
			want = "compact"
		}
		return &TopicMismatchError{Topic: tp.Name, Setting: "cleanup.policy", Found: policy, Want: want}
	}
	return nil
}

// ConnectTimeout bounds how long Open waits for a real cluster's first
// answer, and each dial of the clients it makes.
const ConnectTimeout = 10 * time.Second

// NewClient returns a client for the cluster with opts added.
func (c *Cluster) NewClient(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Addrs...), kgo.DialTimeout(ConnectTimeout)}, opts...)...)
}

// Close releases the cluster (and stops the embedded broker). On a real
// cluster, a run under a generated prefix first deletes the topics it
// created and the consumer groups under its prefix: nobody can name them
// again. A chosen prefix keeps them.
func (c *Cluster) Close() {
	if !c.Embedded && c.Admin != nil && c.Target.Prefix != "" && !c.Target.Chosen {
		c.cleanUp()
	}
	if c.client != nil {
		c.client.Close()
	}
	if c.embedded != nil {
		c.embedded.Close()
	}
}

// cleanUp deletes the run's topics and groups, and says so (or why not).
func (c *Cluster) cleanUp() {
	ctx, cancel := context.WithTimeout(context.Background(), ConnectTimeout)
	defer cancel()
	var errs []error
	if len(c.created) > 0 {
		resps, err := c.Admin.DeleteTopics(ctx, c.created...)
		errs = append(errs, err)
		for _, r := range resps.Sorted() {
			errs = append(errs, r.Err)
		}
	}
	var groups []string
	listed, err := c.Admin.ListGroups(ctx)
	errs = append(errs, err)
	for _, g := range listed.Groups() {
		if strings.HasPrefix(g, c.Target.Prefix) {
			groups = append(groups, g)
		}
	}
	for left := groups; len(left) > 0; {
		resps, err := c.Admin.DeleteGroups(ctx, left...)
		if err != nil {
			errs = append(errs, err)
			break
		}
		left = nil
		for _, r := range resps.Sorted() {
			if errors.Is(r.Err, kerr.NonEmptyGroup) && ctx.Err() == nil {
				left = append(left, r.Group) // its last member is leaving
				continue
			}
			errs = append(errs, r.Err)
		}
		if len(left) > 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(c.out, "could not delete every topic and group of run prefix %q: %v\n", c.Target.Prefix, err)
		return
	}
	fmt.Fprintf(c.out, "deleted this run's %d topics and %d groups (prefix %q)\n", len(c.created), len(groups), c.Target.Prefix)
}

// StartApp runs the stages as one application instance with timeouts
// suited to a demo, state in a temporary directory. stop cancels the run,
// waits for it and removes the state.
func (c *Cluster) StartApp(ctx context.Context, appID string, stages ...*stage.Stage) (app *stage.App, stop func(), err error) {
	dir, err := os.MkdirTemp("", "parsley-"+appID+"-")
	if err != nil {
		return nil, nil, err
	}
	a, err := stage.New(stage.Config{
		ApplicationID: appID, InstanceID: "instance-1", Brokers: c.Addrs,
		StateDir:     filepath.Join(dir, "state"),
		PollInterval: 50 * time.Millisecond, SessionTimeout: 6 * time.Second,
		RebalanceTimeout: 6 * time.Second, TransactionTimeout: 10 * time.Second,
		LeaveOnShutdown: true, // this instance never comes back: its group can go
		Logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, stages...)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Run(runCtx)
	}()
	return a, func() { cancel(); <-done; os.RemoveAll(dir) }, nil
}

// Consume reads topic from the start as a read_committed consumer and
// calls fn for each record until fn reports it is done.
func (c *Cluster) Consume(ctx context.Context, topic string, fn func(*kgo.Record) (done bool, err error)) error {
	cl, err := c.NewClient(kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer cl.Close()
	for got := 0; ; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("read %s: stopped after %d records: %w", topic, got, err)
		}
		for it := fs.RecordIter(); !it.Done(); {
			got++
			if done, err := fn(it.Next()); done || err != nil {
				return err
			}
		}
	}
}
