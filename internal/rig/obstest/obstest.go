// Package obstest holds the helpers the observer's tests share across its
// packages: a deadline per test, a topology builder, one observer pass
// over a cluster, and the web server over an observer. It imports testing
// and is for tests only.
package obstest

import (
	"context"
	"log/slog"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/obsdemo"
	"github.com/parsley-go/parsley/observer"
	"github.com/parsley-go/parsley/observer/web"
	"github.com/prometheus/client_golang/prometheus"
)

// Ctx returns a context that ends with the test, or after 45 seconds.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// Builder returns a topology builder on c, closed with the test.
func Builder(t testing.TB, c *broker.Cluster) *obsdemo.Builder {
	t.Helper()
	b, err := obsdemo.NewBuilder(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// Scan runs one observer pass over every topic of c into a fresh store,
// with cfg's other settings, and returns the store and the observer.
func Scan(t testing.TB, ctx context.Context, c *broker.Cluster, cfg observer.Config) (*observer.Store, *observer.Observer) {
	t.Helper()
	st, err := observer.OpenStore(ctx, filepath.Join(t.TempDir(), "obs.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg.Brokers, cfg.Pattern = c.Addrs(), regexp.MustCompile(".*")
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	o, err := observer.New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Close)
	if err := o.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	return st, o
}

// Server returns the web server over o, as `parsley-observe serve` builds
// it: findings from o, o's metrics at /metrics.
func Server(t testing.TB, o *observer.Observer) *web.Server {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(o.Collector())
	s, err := web.New(web.Config{Store: o.Store(), Findings: o.Findings, Gatherer: reg, Health: o.Health, Payload: o.Payload})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Sharded is a topology for observers sharing the topics in a group: the
// faulty one (every finding) and a spread one (findings over partitions
// different shards read), to which each Round adds.
type Sharded struct {
	t      testing.TB
	ctx    context.Context
	c      *broker.Cluster
	spread *obsdemo.Spread
}

// ShardedTopology builds the faulty and spread topologies on c and writes
// one round of the spread one.
func ShardedTopology(t testing.TB, ctx context.Context, c *broker.Cluster) *Sharded {
	t.Helper()
	b := Builder(t, c)
	if _, err := b.Faulty(ctx); err != nil {
		t.Fatal(err)
	}
	sp, err := b.NewSpread(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := &Sharded{t: t, ctx: ctx, c: c, spread: sp}
	s.Round()
	return s
}

// Round writes another round of the spread topology.
func (s *Sharded) Round() {
	s.t.Helper()
	if _, err := s.spread.Round(s.ctx); err != nil {
		s.t.Fatal(err)
	}
}

// Single returns what one observer reading every topic finds now.
func (s *Sharded) Single() []observer.Finding {
	s.t.Helper()
	_, o := Scan(s.t, s.ctx, s.c, observer.Config{})
	fs, err := o.Findings(s.ctx)
	if err != nil {
		s.t.Fatal(err)
	}
	return fs
}
