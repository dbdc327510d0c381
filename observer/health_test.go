package observer_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/observer"
)

// TestRunWaitsForTopicsThatAppearLater: Run given a pattern that matches
// nothing yet, and a named topic that does not exist yet, keeps running,
// reports both as missing while the cluster reads fine, and observes them
// once they are created.
func TestRunWaitsForTopicsThatAppearLater(t *testing.T) {
	ctx := ctxFor(t)
	c := broker.New(t)
	b := builder(t, c)
	st, o := running(t, ctx, observer.Config{Brokers: c.Addrs(), Topics: []string{"named"}, Pattern: regexp.MustCompile("^later-"),
		Refresh: 100 * time.Millisecond})
	waitFor(t, ctx, "a probe", func() bool { return !o.Health().Checked.IsZero() })
	h := o.Health()
	if !h.Up || !slices.Equal(h.Missing, []string{"named", "pattern ^later-"}) || len(h.Topics) != 0 {
		t.Fatalf("health before the topics exist: %+v; want up, missing the named topic and the pattern", h)
	}
	if err := b.Create(ctx, 1, "later-a", "named"); err != nil {
		t.Fatal(err)
	}
	var recs []headers.Coordinate
	for _, topic := range []string{"later-a", "named"} {
		at, err := b.Stamped(ctx, topic, 0, &headers.Stamp{})
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, at)
	}
	waitFor(t, ctx, "records of topics created after the start", func() bool {
		for _, at := range recs {
			if _, err := st.Record(ctx, at); err != nil {
				return false
			}
		}
		return true
	})
	waitFor(t, ctx, "health to list both topics", func() bool {
		h := o.Health()
		return len(h.Missing) == 0 && slices.Equal(h.Topics, []string{"later-a", "named"})
	})
}

// running opens a fresh store and runs an observer configured by cfg (its
// logs discarded) until the test ends.
func running(t *testing.T, ctx context.Context, cfg observer.Config) (*observer.Store, *observer.Observer) {
	t.Helper()
	st, err := observer.OpenStore(ctx, filepath.Join(t.TempDir(), "obs.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg.Logger = slog.New(slog.DiscardHandler)
	o, err := observer.New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Close)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- o.Run(rctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return st, o
}

// waitFor polls cond until it holds, failing the test when ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
