package stage

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
)

func merge(into, from map[string][]string) {
	for k, vs := range from {
		into[k] = append(into[k], vs...)
	}
}

// TestMigrationAcrossJoinAndLeave: one instance starts alone on a
// two-partition source, a second joins while it is mid-step (the revoke
// aborts that step; a task moves to the newcomer), then the first leaves
// cleanly (its task moves back). Every record is processed exactly
// once, and the per-key counts continue across every move, so state
// followed its task; at the end the survivor's stores hold every key's
// count.
func TestMigrationAcrossJoinAndLeave(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := counterStage(in, out)
	e.changelogs(2, st)
	cfg1, cfg2 := e.config("i1"), e.config("i2")

	cfg1.MaxPollRecords = 4
	cfg1.MaxStepRecords = 4 // one poll a step: the test counts steps
	a1, err := New(cfg1, st)
	if err != nil {
		t.Fatal(err)
	}
	// Slow steps, so the second instance's join revokes partitions while
	// a step is in flight.
	a1.hooks.beforeEnd = func(int64) bool { time.Sleep(5 * time.Millisecond); return false }
	var aborted atomic.Int64
	a1.hooks.afterAbort = func() { aborted.Add(1) }
	r1 := e.startApp(a1)
	want := e.inputs("in", 120, 4, 2, 0)
	e.readCommitted("out", 10, 30*time.Second)

	r2 := e.start(cfg2, st)
	waitFor(t, 30*time.Second, "a task to move to the second instance", func() bool {
		return len(r1.app.Tasks()) == 1 && len(r2.app.Tasks()) == 1
	})
	merge(want, e.inputs("in", 40, 4, 2, 120))
	e.readExactly("out", 160, 30*time.Second)
	if r1.app.CommittedSteps() == 0 || r2.app.CommittedSteps() == 0 {
		t.Fatalf("committed steps: i1 %d, i2 %d; both should have worked", r1.app.CommittedSteps(), r2.app.CommittedSteps())
	}

	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the second instance to own both tasks", func() bool {
		return len(r2.app.Tasks()) == 2
	})
	merge(want, e.inputs("in", 40, 4, 2, 160))
	outs := e.readExactly("out", 200, 30*time.Second)
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, outs, want)
	checkStates(t, foldStates(t, cfg2.StateDir), want)
	t.Logf("steps of the first instance aborted by the rebalances: %d", aborted.Load())
	if aborted.Load() == 0 {
		t.Fatal("no step was in flight at a rebalance; the test did not exercise a revoke mid-step")
	}
}

// TestFencedInstanceRecovers: another client takes the instance's
// transactional ID, fencing it. The instance builds a new client, rejoins
// and carries on without exiting, and no record is lost or duplicated.
func TestFencedInstanceRecovers(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := counterStage(in, out)
	e.changelogs(2, st)
	cfg := e.config("i1")
	a, err := New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	var sessions atomic.Int64
	a.hooks.onSession = func(*kgo.GroupTransactSession) { sessions.Add(1) }
	r := e.startApp(a)
	want := e.inputs("in", 30, 3, 2, 0)
	e.readExactly("out", 30, 30*time.Second)

	// The usurper: same transactional ID, a new epoch.
	usurper, err := e.c.NewClient(kgo.TransactionalID(cfg.ApplicationID + "-" + cfg.InstanceID))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, _, err := usurper.ProducerID(ctx); err != nil {
		t.Fatal(err)
	}
	usurper.Close()

	merge(want, e.inputs("in", 30, 3, 2, 30))
	outs := e.readExactly("out", 60, 30*time.Second)
	if err, done := r.exited(0); done {
		t.Fatalf("Run exited after being fenced: %v", err)
	}
	if sessions.Load() < 2 {
		t.Fatalf("%d client sessions; the fenced client should have been replaced", sessions.Load())
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, outs, want)
	checkStates(t, foldStates(t, cfg.StateDir), want)
}
