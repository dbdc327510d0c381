package stage

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
)

// TestStorePathPerApplication: two applications sharing a state directory,
// each with a stage named "count", keep separate store files (#21: the path
// had no application in it). A store left in the earlier layout
// (<StateDir>/<stage>-<p>.db) moves into its application's directory when
// that application starts, and the other application leaves it alone; the
// counts continue from it.
func TestStorePathPerApplication(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in"}, broker.Topic{Name: "out"}, broker.Topic{Name: "out2"})
	in := NewTopic("in", String(), String())
	mine, theirs := counterStage(in, NewTopic("out", String(), String())), counterStage(in, NewTopic("out2", String(), String()))
	e.changelogs(1, mine)
	if err := e.c.CreateTopics(context.Background(), broker.Topic{Name: ChangelogTopic("other", "count"), Configs: compact}); err != nil {
		t.Fatal(err)
	}
	cfg := e.config("i1")
	otherCfg := cfg
	otherCfg.ApplicationID = "other"
	run := func(cfg Config, st *Stage, sink string, total int) {
		t.Helper()
		r := e.start(cfg, st)
		e.readExactly(sink, total, 30*time.Second)
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
	}
	first := e.inputs("in", 4, 2, 1, 0)
	run(cfg, mine, "out", 4)
	path, legacy := storePath(cfg.StateDir, e.app, "count", 0), legacyStorePath(cfg.StateDir, "count", 0)
	if filepath.Dir(path) != filepath.Join(cfg.StateDir, e.app) {
		t.Fatalf("StorePath = %s, want it under %s", path, filepath.Join(cfg.StateDir, e.app))
	}
	// An earlier release left the store where every application's
	// "count" would find it.
	if err := os.Rename(path, legacy); err != nil {
		t.Fatal(err)
	}

	run(otherCfg, theirs, "out2", 4)
	if _, err := os.Stat(legacy); err != nil {
		t.Fatalf("the other application took this one's store: %v", err)
	}
	if _, err := os.Stat(storePath(cfg.StateDir, "other", "count", 0)); err != nil {
		t.Fatalf("the other application's store is not in its directory: %v", err)
	}

	second := e.inputs("in", 2, 2, 1, 4)
	run(cfg, mine, "out", 6)
	if _, err := os.Stat(legacy); err == nil {
		t.Error("the legacy store is still there after its application started")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the store did not move to %s: %v", path, err)
	}
	want := maps.Clone(first)
	for k, vs := range second {
		want[k] = slices.Concat(want[k], vs)
	}
	checkCounts(t, e.readCommitted("out", 6, 10*time.Second), want)
	checkStates(t, foldStates(t, filepath.Dir(path)), want)
}
