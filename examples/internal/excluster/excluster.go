// Package excluster gives the examples a Kafka cluster: the embedded
// in-process broker by default, or a real cluster when seed brokers are
// given. Either way the examples create the topics they need and talk to
// the cluster through the same franz-go clients.
package excluster

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/parsley-go/parsley/internal/broker"
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
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs...))
		if err != nil {
			return nil, fmt.Errorf("connect to %s: %w", brokers, err)
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

// NewClient returns a client for the cluster with opts added.
func (c *Cluster) NewClient(opts ...kgo.Opt) (*kgo.Client, error) {
	return kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.Addrs...)}, opts...)...)
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
