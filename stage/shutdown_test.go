package stage

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
)

// TestShutdownMidStep cancels Run's context in the middle of a step. The
// step finishes (it is never left half done), Run returns nil, the instance
// — a static member told to leave on shutdown, as when scaling in — leaves
// its group at once (a successor is assigned every partition without
// waiting for a session timeout), the stores are closed, and the successor
// carries on with every record processed exactly once.
func TestShutdownMidStep(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := counterStage(in, out)
	e.changelogs(2, st)
	cfg := e.config("i1")
	cfg.MaxPollRecords = 5
	cfg.MaxStepRecords = 5                // one poll a step: the test counts steps
	cfg.SessionTimeout = 30 * time.Second // a member that does not leave would block the successor
	cfg.LeaveOnShutdown = true
	a, err := New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	var r *running
	var cancelled atomic.Bool
	a.hooks.beforeEnd = func(step int64) bool {
		if step == 2 && cancelled.CompareAndSwap(false, true) {
			r.cancel()
		}
		return false
	}
	want := e.inputs("in", 60, 6, 2, 0)
	r = e.startApp(a)
	err, done := r.exited(30 * time.Second)
	if !done {
		t.Fatal("Run did not return after its context was cancelled")
	}
	if err != nil {
		t.Fatalf("Run = %v, want nil after a cancel", err)
	}
	if a.CommittedSteps() != 3 {
		t.Fatalf("committed %d steps, want 3 (the one in progress at the cancel finished)", a.CommittedSteps())
	}
	if n := len(a.Tasks()); n != 0 {
		t.Fatalf("%d tasks still open after Run returned", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	groups, err := e.c.Admin().DescribeGroups(ctx, cfg.ApplicationID)
	if err != nil {
		t.Fatal(err)
	}
	if g := groups[cfg.ApplicationID]; len(g.Members) != 0 {
		t.Fatalf("group still has %d members after Run returned", len(g.Members))
	}

	cfg2 := e.config("i2")
	cfg2.SessionTimeout = 30 * time.Second
	r2 := e.start(cfg2, st)
	outs := e.readExactly("out", 60, 20*time.Second)
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, outs, want)
}
