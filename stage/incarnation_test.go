package stage

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/state"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestRecreatedChangelogWipesStore: a state directory outlives its
// changelog — the whole cluster was recreated (every run of an embedded
// broker), or only the changelog topic was deleted and created again. The
// next start wipes the task's store with a WARN that names the store and
// why, restores from the new changelog, and processes the new inputs from
// fresh state, where before it stopped with "changelog ends before the
// store's checkpoint".
func TestRecreatedChangelogWipesStore(t *testing.T) {
	topics := []broker.Topic{{Name: "in"}, {Name: "out"}}
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := counterStage(in, out)
	for _, tc := range []struct {
		name string
		// next returns the environment of the second run, with the
		// changelog of another incarnation than the first run's.
		next func(t *testing.T, e *env) *env
	}{
		{"new cluster", func(t *testing.T, _ *env) *env {
			e := newEnv(t, topics...)
			e.changelogs(1, st)
			return e
		}},
		{"changelog recreated", func(t *testing.T, e *env) *env {
			if err := e.c.DeleteTopics(context.Background(), ChangelogTopic(e.app, st.Name())); err != nil {
				t.Fatal(err)
			}
			e.changelogs(1, st)
			return e
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, topics...)
			e.changelogs(1, st)
			cfg := e.config("i1")
			first := e.inputs("in", 12, 3, 1, 0)
			r := e.start(cfg, st)
			checkCounts(t, e.readExactly("out", 12, 30*time.Second), first)
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
			store := storePath(cfg.StateDir, e.app, "count", 0)
			if _, err := os.Stat(store); err != nil {
				t.Fatalf("premise: no store after the first run: %v", err)
			}

			e2 := tc.next(t, e)
			logs := &wipeLog{}
			cfg2 := e2.config("i1")
			cfg2.StateDir, cfg2.Logger = cfg.StateDir, slog.New(logs)
			from, before := 0, 0 // a new cluster starts empty
			if e2 == e {
				from, before = 12, 12
			}
			second := e2.inputs("in", 6, 3, 1, from)
			r = e2.start(cfg2, st)
			got := e2.readExactly("out", before+6, 30*time.Second)
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
			// The second run's outputs count from 1 again: the fold
			// state of the old changelog is gone with it.
			checkCounts(t, got[before:], second)
			checkStates(t, foldStates(t, cfg.StateDir), second)

			w := logs.take()
			if len(w) != 1 {
				t.Fatalf("wipe logged %d times, want once: %v", len(w), w)
			}
			if m := w[0]; m["level"] != "WARN" || m["stage"] != "count" || m["partition"] != "0" || m["store"] != store ||
				!strings.Contains(m["reason"], "another incarnation of the changelog (topic recreated, or another cluster)") ||
				m["was"] == m["now"] || !strings.Contains(m["was"], "topic ID") {
				t.Fatalf("wipe logged as %v, want a WARN naming stage count, partition 0, store %s, the reason and both changelogs", m, store)
			}
		})
	}
}

// TestTruncatedChangelogStopsTask: the brokers come back from an older copy
// of their disks, so the changelog — the same topic, same ID, same cluster —
// ends before a store's checkpoint: the broker lost committed records. The
// task stops with a typed error that says so and names the store; the store
// is left as it was for the operator to decide.
func TestTruncatedChangelogStopsTask(t *testing.T) {
	broker.KfakeOnly(t, "restarts kfake from an older copy of its data directory (kfake.DataDir)")
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := counterStage(in, out)
	data, old := t.TempDir(), t.TempDir()
	start := func(dir string) *env {
		t.Helper()
		return newEnvWith(t, []broker.Option{broker.FakeOpts(kfake.DataDir(dir))})
	}
	e := newEnvWith(t, []broker.Option{broker.FakeOpts(kfake.DataDir(data))}, broker.Topic{Name: "in"}, broker.Topic{Name: "out"})
	e.changelogs(1, st)
	stateDir := e.config("i1").StateDir
	run := func(e *env, n, from, total int) {
		t.Helper()
		e.inputs("in", n, 2, 1, from)
		cfg := e.config("i1")
		cfg.StateDir = stateDir
		r := e.start(cfg, st)
		e.readExactly("out", total, 30*time.Second)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
	}
	run(e, 4, 0, 4)
	e.c.Close()
	if err := os.CopyFS(old, os.DirFS(data)); err != nil {
		t.Fatal(err)
	}
	e = start(data)
	run(e, 4, 4, 8)
	e.c.Close()

	store := storePath(stateDir, e.app, "count", 0)
	s, err := state.Open(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	cp := s.Checkpoint()
	s.Close()

	e = start(old)
	cfg := e.config("i1")
	cfg.StateDir = stateDir
	r := e.start(cfg, st)
	err, done := r.exited(30 * time.Second)
	if !done {
		t.Fatal("the task kept running on a changelog that lost committed records")
	}
	var lost *state.ChangelogLostError
	if !errors.As(err, &lost) || !errors.Is(err, ErrChangelogLost) {
		t.Fatalf("Run = %v, want a ChangelogLostError", err)
	}
	if lost.Path != store || lost.Checkpoint != cp || lost.End >= cp {
		t.Fatalf("error names store %s at checkpoint %d, end %d; want %s at %d, end below it", lost.Path, lost.Checkpoint, lost.End, store, cp)
	}
	for _, s := range []string{`stage "count" partition 0`, "lost records", store} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	s, err = state.Open(context.Background(), store)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.Checkpoint() != cp {
		t.Fatalf("refused store's checkpoint moved from %d to %d", cp, s.Checkpoint())
	}
}
