// Package excluster gives the examples a Kafka cluster: the embedded
// in-process broker by default, or a real cluster when seed brokers are
// given. Either way the examples create the topics they need and talk to
// the cluster through the same franz-go clients.
package excluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/parsley-go/parsley/internal/broker"
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

// Cluster is the cluster an example runs on.
type Cluster struct {
	Addrs    []string
	Embedded bool
	Admin    *kadm.Client

	embedded *broker.Cluster
	client   *kgo.Client
}

// Open starts the embedded broker when brokers is empty, or connects to
// the comma-separated seed brokers, and makes sure every topic exists.
func Open(ctx context.Context, brokers string, topics ...Topic) (*Cluster, error) {
	c := &Cluster{}
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
	for _, t := range topics {
		configs := map[string]*string{}
		if t.Compact {
			v := "compact"
			configs["cleanup.policy"] = &v
		}
		resp, err := c.Admin.CreateTopic(ctx, t.Partitions, -1, configs, t.Name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			c.Close()
			return nil, fmt.Errorf("create topic %s: %w", t.Name, err)
		}
	}
	return c, nil
}

// ConnectTimeout bounds how long Open waits for a real cluster's first
// answer, and each dial of the clients it makes.
const ConnectTimeout = 10 * time.Second

// NewClient returns a client for the cluster with opts added.
func (c *Cluster) NewClient(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Addrs...), kgo.DialTimeout(ConnectTimeout)}, opts...)...)
}

// Close releases the cluster (and stops the embedded broker).
func (c *Cluster) Close() {
	if c.client != nil {
		c.client.Close()
	}
	if c.embedded != nil {
		c.embedded.Close()
	}
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
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
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
