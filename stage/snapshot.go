package stage

// The published snapshot: after every step and idle poll the session loop
// samples its tasks and publishes what readers (Tasks, ExplainHolds, the
// collector, the health handler) may see, so none of them waits for a step.

import (
	"strings"
	"sync/atomic"
	"time"

	"github.com/parsley-go/parsley/protocol"
)

// status is what other goroutines read of the App: atomics, written by
// Run and the session loop, read by anyone without waiting for a step.
type status struct {
	snap             atomic.Pointer[snapshot] // published by the session loop
	commits, aborts  atomic.Uint64            // steps ended either way
	committed        atomic.Int64             // committed steps
	latency          *stepLatency             // a histogram: locks its own
	running          atomic.Bool              // Run was called
	started, stopped atomic.Bool
	beat             atomic.Int64 // real-clock unix nanos of the loop's last sign of life
}

// snapshot is one publication: an entry per task, and readiness.
type snapshot struct {
	tasks    []taskSnapshot
	standbys []standbySnapshot // standby.go
	ready    bool
	why      string // why not ready
}

type taskSnapshot struct {
	stage                                    string
	partition                                int32
	rebuilding                               bool         // no node: the task restores or rebuilds
	restoring                                bool         // its store is being restored (restore.go)
	holds                                    []HeldRecord // heads, HeldFor unset (computed on read)
	held                                     int
	delivered, replays, ticks, sweepsSkipped uint64
	stampOffsets, stampSeqs                  int
}

// taskCounts are a task's counts over committed steps. base is the node's
// counters at its last commit: committed counts are the sum of the deltas
// over committed steps, so an aborted step's work is not counted and a
// rebuilt node (counters from zero) adds on.
type taskCounts struct {
	base                 protocol.Counters
	delivered, replays   uint64
	ticks, sweepsSkipped uint64
}

// committed adds the node's work since the last commit.
func (c *taskCounts) committed(now protocol.Counters) {
	c.delivered += now.Delivered - c.base.Delivered
	c.replays += now.ReplaysSkipped - c.base.ReplaysSkipped
	c.base = now
}

// rebuilt restarts the deltas: a new node counts from zero.
func (c *taskCounts) rebuilt() { c.base = protocol.Counters{} }

// stepEnded runs when App.step returns: it records the step metrics and
// publishes a fresh snapshot.
func (a *App) stepEnded(start time.Time, committed bool) {
	a.status.latency.observe(time.Since(start))
	if committed {
		a.status.commits.Add(1)
	} else {
		a.status.aborts.Add(1)
	}
	a.observe()
}

// observe runs on the session loop between steps: it samples every task's
// holds and counters, warns about holds that outlived HoldWarningAfter,
// and publishes the snapshot readers use.
func (a *App) observe() {
	a.status.beat.Store(time.Now().UnixNano())
	now := a.cfg.WallClock()
	prev := a.status.snap.Load()
	snap := &snapshot{ready: a.tm.settled()}
	if !snap.ready {
		snap.why = "joining the group"
	}
	tasks, notReady := a.tm.snapshots(now, prev)
	snap.tasks = tasks
	snap.standbys = a.tm.standby.snapshots()
	if snap.ready && len(notReady) > 0 {
		snap.ready = false
		snap.why = strings.Join(notReady, "; ")
	}
	a.status.snap.Store(snap)
}

// sessionEnded publishes that the instance is not ready.
func (a *App) sessionEnded() {
	a.status.snap.Store(&snapshot{why: "rejoining after a client failure"})
}
