package stage

import (
	"log/slog"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/broker"
)

// TestRestoreDoesNotRejoin: a fresh instance restores its tasks, whose
// partitions stay paused until the restores end. That pause is not an
// assignment holding partitions back, and the instance does not ask its
// group to rebalance for it (a forced rebalance on every start cost half
// a second and more).
func TestRestoreDoesNotRejoin(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	out := NewTopic("out", String(), String())
	st := On(Named("copy"), NewTopic("in", String(), String()), func(m Message[string, string]) ([]Emission, error) {
		return []Emission{out.Send(m.Key, m.Value)}, nil
	}).Into(out).MustBuild()
	e.changelogs(2, st)
	e.produce(rec("in", 0, "a", "1"), rec("in", 1, "b", "2"))
	logs := new(syncBuffer)
	cfg := e.config("i1")
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	r := e.start(cfg, st)
	for deadline := time.Now().Add(30 * time.Second); r.app.CommittedSteps() == 0 || len(logs.lines("partitions held back")) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no committed step with paused restoring partitions within 30s:\n%s", logs.lines(""))
		}
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if l := logs.lines("asking the group to rebalance"); len(l) > 0 {
		t.Fatalf("a fresh start with restoring tasks asked the group to rebalance: %q", l)
	}
}
