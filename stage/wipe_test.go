package stage

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/state"
)

// wipeLog keeps the attributes of every "task store wiped" message.
type wipeLog struct {
	mu    sync.Mutex
	wipes []map[string]string
}

func (l *wipeLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *wipeLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.Contains(r.Message, "task store wiped") {
		return nil
	}
	m := map[string]string{"level": r.Level.String()}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	l.mu.Lock()
	l.wipes = append(l.wipes, m)
	l.mu.Unlock()
	return nil
}
func (l *wipeLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *wipeLog) WithGroup(string) slog.Handler      { return l }

func (l *wipeLog) take() []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.wipes
	l.wipes = nil
	return w
}

// TestStaleStoreWipedOnRestart: the runtime stamps checkpoints with
// Config.WallClock, and restores on the same clock. A restart a minute
// later keeps the stores; one 30h later — past the changelog's default
// delete.retention.ms — wipes every task's store, logs it at INFO with the
// stage, partition and age, and rebuilds it from the changelog start, so
// the fold counts continue exactly.
func TestStaleStoreWipedOnRestart(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := counterStage(in, out)
	e.changelogs(2, st)
	clk := newManualClock()
	logs := &wipeLog{}
	cfg := e.config("i1")
	cfg.WallClock, cfg.Logger = clk.Now, slog.New(logs)

	want := map[string][]string{}
	total := 0
	run := func() {
		t.Helper()
		for k, vs := range e.inputs("in", 20, 4, 2, total) {
			want[k] = append(want[k], vs...)
		}
		total += 20
		r := e.start(cfg, st)
		e.readExactly("out", total, 30*time.Second)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
	}
	checkpointTimes := func() []time.Time {
		t.Helper()
		var ts []time.Time
		for p := range 2 {
			s, err := state.Open(context.Background(), storePath(cfg.StateDir, e.app, "count", int32(p)))
			if err != nil {
				t.Fatal(err)
			}
			ts = append(ts, s.CheckpointTime())
			s.Close()
		}
		return ts
	}

	run()
	t0 := clk.Now()
	if got := checkpointTimes(); !got[0].Equal(t0) || !got[1].Equal(t0) {
		t.Fatalf("checkpoint times %v, want the injected clock's %v", got, t0)
	}
	clk.Advance(time.Minute)
	run()
	if w := logs.take(); len(w) != 0 {
		t.Fatalf("a restart a minute later wiped: %v", w)
	}
	clk.Advance(30 * time.Hour)
	run()
	w := logs.take()
	var parts []string
	for _, m := range w {
		if m["level"] != "INFO" || m["stage"] != "count" || m["age"] != "30h0m0s" || m["delete_retention"] != "24h0m0s" {
			t.Errorf("wipe logged as %v, want INFO for stage count, age 30h, retention 24h", m)
		}
		parts = append(parts, m["partition"])
	}
	slices.Sort(parts)
	if !slices.Equal(parts, []string{"0", "1"}) {
		t.Fatalf("wipes logged for partitions %q, want 0 and 1 once each", parts)
	}
	checkCounts(t, e.readExactly("out", total, 10*time.Second), want)
	checkStates(t, foldStates(t, cfg.StateDir), want)
	if got := checkpointTimes(); !got[0].Equal(clk.Now()) || !got[1].Equal(clk.Now()) {
		t.Fatalf("checkpoint times after the wipe %v, want %v", got, clk.Now())
	}
}

// TestIdleTaskCheckpointRefreshed: a task whose steps write nothing still
// has its checkpoint time moved to the committing step's start once it is
// checkpointRefresh old, so an instance that ran idle partitions for a day
// does not wipe them at its next start.
func TestIdleTaskCheckpointRefreshed(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := counterStage(in, out)
	e.changelogs(2, st)
	clk := newManualClock()
	cfg := e.config("i1")
	cfg.WallClock = clk.Now
	r := e.start(cfg, st)
	e.produce(rec("in", 0, "a", "1"))
	e.readExactly("out", 1, 30*time.Second)
	clk.Advance(checkpointRefresh) // partition 1 now idle that long
	e.produce(rec("in", 0, "a", "2"))
	e.readExactly("out", 2, 30*time.Second)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	s, err := state.Open(context.Background(), storePath(cfg.StateDir, e.app, "count", 1))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.CheckpointTime(); !got.Equal(clk.Now()) {
		t.Fatalf("idle task's checkpoint time = %v, want the last step's start %v", got, clk.Now())
	}
}
