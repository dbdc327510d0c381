package observer_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/obstest"
	"github.com/parsley-go/parsley/observer"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// shardOf is one running shard of a group, in this process.
type shardOf struct {
	o    *observer.Observer
	reg  *prometheus.Registry
	stop func()
}

// runShard runs an observer as member instance of group until stop.
func runShard(t *testing.T, ctx context.Context, c *broker.Cluster, group, instance string) *shardOf {
	t.Helper()
	st, err := observer.OpenStore(ctx, filepath.Join(t.TempDir(), instance+".db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	// PARSLEY_SHARD_DEBUG=1 writes the shards' logs to the test's output.
	log := slog.New(slog.DiscardHandler)
	if os.Getenv("PARSLEY_SHARD_DEBUG") != "" {
		log = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})).With("shard", instance)
	}
	o, err := observer.New(observer.Config{Brokers: c.Addrs(), Pattern: regexp.MustCompile(".*"),
		Group: group, Instance: instance, AdvertiseURL: "http://" + instance, SessionTimeout: 6 * time.Second,
		Refresh: 200 * time.Millisecond, PruneEvery: 300 * time.Millisecond, Logger: log}, st)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(o.Collector())
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- o.Run(rctx) }()
	s := &shardOf{o: o, reg: reg}
	var stopped bool
	s.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("shard %s: Run: %v", instance, err)
		}
		o.Close()
	}
	t.Cleanup(s.stop)
	return s
}

// shape is what the sharing must keep of a finding: everything but when
// it was seen and its number (a shard names findings by a hash of the
// key).
func shape(f observer.Finding) string {
	return fmt.Sprintf("%s %s %s [%s] n=%d %s: %s", f.State, f.Severity, f.Key, strings.Join(f.Coordinates, " "), f.Count, f.Code, f.Summary)
}

// shapes returns the shapes of the findings that hold (open or
// acknowledged), or of all of them.
func shapes(fs []observer.Finding, holding bool) []string {
	var out []string
	for _, f := range fs {
		if !holding || f.State != observer.StateResolved {
			out = append(out, shape(f))
		}
	}
	slices.Sort(out)
	return out
}

// openByCode sums a metric over the shards: how many open findings of
// each code they count between them.
func openByCode(t *testing.T, shards []*shardOf) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, s := range shards {
		mfs, err := s.reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "parsley_observer_findings" {
				continue
			}
			for _, m := range mf.GetMetric() {
				out[label(m, "code")] += m.GetGauge().GetValue()
			}
		}
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// agree waits until every shard lists exactly want (the findings of one
// observer over the same topics) as holding, those with a key in acked as
// acknowledged and the rest open, and the shards count each code's open
// findings once between them.
func agree(t *testing.T, ctx context.Context, shards []*shardOf, want []observer.Finding, acked map[string]bool) {
	t.Helper()
	want = slices.Clone(want)
	wantCounts := map[string]float64{}
	for i, f := range want {
		switch {
		case !f.Open():
		case acked[f.Key]:
			want[i].State = observer.StateAcknowledged
		default:
			wantCounts[string(f.Code)]++
		}
	}
	wantShapes := shapes(want, true)
	for _, c := range observer.AllCodes() {
		wantCounts[string(c)] += 0
	}
	var last []string
	var lastCounts map[string]float64
	for {
		ok := true
		for _, s := range shards {
			fs, err := s.o.Findings(ctx)
			if err != nil {
				ok = false
				break
			}
			if last = shapes(fs, true); !slices.Equal(last, wantShapes) {
				ok = false
			}
		}
		if ok {
			if lastCounts = openByCode(t, shards); maps.Equal(lastCounts, wantCounts) {
				// Nothing that holds was resolved and raised again on the way
				// (a shard judging a channel half read, or two recording it).
				for i, s := range shards {
					fs, err := s.o.Findings(ctx)
					if err != nil {
						t.Fatal(err)
					}
					for _, f := range fs {
						if f.State == observer.StateResolved {
							continue
						}
						h, err := s.o.Store().History(ctx, f.ID)
						if err != nil {
							t.Fatal(err)
						}
						for _, e := range h {
							if e.What != "acknowledged" {
								t.Fatalf("shard %d: %s was %s (%s): %+v", i, f.Key, e.What, e.Why, h)
							}
						}
					}
				}
				return
			}
		}
		select {
		case <-ctx.Done():
			for i, s := range shards {
				fs, _ := s.o.Findings(context.Background())
				for _, f := range fs {
					if !slices.Contains(wantShapes, shape(f)) && f.State != observer.StateResolved {
						h, _ := s.o.Store().History(context.Background(), f.ID)
						t.Logf("shard %d: %s: history %+v", i, shape(f)[:80], h)
					}
				}
			}
			t.Fatalf("shards never agreed with one observer.\nwant:\n  %s\ngot (a shard):\n  %s\nopen by code over the shards: %v, want %v",
				strings.Join(wantShapes, "\n  "), strings.Join(last, "\n  "), lastCounts, wantCounts)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestShardsReportWhatOneObserverReports: two, then three observers sharing
// the topics in a group list together exactly the findings one observer
// over the same topics lists — every code, with gaps and late-joiner
// windows spread over partitions that different shards read, claims on
// partitions another shard reads, findings added while they run, a shard
// joining, and a shard leaving — and count each once in their metrics.
func TestShardsReportWhatOneObserverReports(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c := broker.New(t)
	top := obstest.ShardedTopology(t, ctx, c)
	round, single := top.Round, top.Single
	round()
	want := single()
	if len(shapes(want, true)) < 12 {
		t.Fatalf("the topology gives only %d open findings:\n%s", len(want), strings.Join(shapes(want, false), "\n"))
	}

	a := runShard(t, ctx, c, "g", "a")
	bb := runShard(t, ctx, c, "g", "b")
	agree(t, ctx, []*shardOf{a, bb}, want, nil)

	// Every finding so far is acknowledged through shard a, whichever
	// shard records it: the acknowledgement reaches its recorder, stops
	// its count, and stays with it wherever it moves.
	acked := map[string]bool{}
	fs, err := a.o.Findings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if _, err := a.o.Acknowledge(ctx, f.ID, "tester", "known"); err != nil {
			t.Fatalf("acknowledge %s through a shard: %v", f.Key, err)
		}
		acked[f.Key] = true
	}
	agree(t, ctx, []*shardOf{a, bb}, want, acked)

	// Findings made while the shards run, and a third shard joining.
	round()
	cc := runShard(t, ctx, c, "g", "c")
	round()
	want = single()
	agree(t, ctx, []*shardOf{a, bb, cc}, want, acked)

	// A shard leaving for good: its partitions move to the others once its
	// session times out, and nothing it recorded is lost or doubled.
	bb.stop()
	round()
	want = single()
	agree(t, ctx, []*shardOf{a, cc}, want, acked)
}
