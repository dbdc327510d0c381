package stage

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kgo"
)

// OpsConfig configures the runtime's operational surfaces: hold warnings
// and the wall clock. It is embedded in Config.
type OpsConfig struct {
	// HoldWarningAfter: a record that has gated its channel (been the head
	// of its hold queue) this long is logged once at WARN with its
	// vc-hold-* code. Zero means the default, 30s; a negative duration
	// disables the warning, leaving ExplainHolds and the metrics.
	HoldWarningAfter time.Duration
	// WallClock returns the current time (default time.Now). It schedules
	// ticks and sweeps, stamps tick timestamps, ages holds, and dates the
	// task stores' checkpoints (a store older than its changelog's
	// delete.retention.ms is wiped at restore, state.Restore);
	// stagetest.Driver injects a manual clock so tick timestamps are
	// deterministic. Step latency is measured with the real clock.
	WallClock func() time.Time
}

func (c OpsConfig) withDefaults() OpsConfig {
	if c.HoldWarningAfter == 0 {
		c.HoldWarningAfter = 30 * time.Second
	}
	if c.WallClock == nil {
		c.WallClock = time.Now
	}
	return c
}

// appOps is the application's operational state. The session goroutine
// writes it; readers (ExplainHolds, the collector, the health handler)
// only load the published snapshot and atomics.
type appOps struct {
	snap atomic.Pointer[opsSnapshot]

	tickTopic []string   // per stage index; "" when the stage does not tick
	tickBind  []*binding // per stage index; nil when the stage does not tick

	commits, aborts atomic.Uint64
	latency         *stepLatency

	started, stopped atomic.Bool
	beat             atomic.Int64 // real-clock unix nanos of the loop's last sign of life
}

// taskOps is a task's operational state, owned by the session goroutine.
// It survives the node's rebuilds; it goes when the task leaves.
type taskOps struct {
	heads map[headers.Channel]*headTrack

	// base is the node's counters at its last commit; committed counts
	// are the sum of the deltas over committed steps, so an aborted step's
	// work is not counted and a rebuilt node (counters from zero) adds on.
	base                 protocol.Counters
	delivered, replays   uint64
	ticks, sweepsSkipped uint64

	built bool // restored and built at least once: processing

	nextTick, tickAt time.Time
	tickPending      bool
	nextSweep        time.Time
	sweptAt          time.Time
	swept            bool // a sweep ran in the open step
}

// opsSnapshot is what the session goroutine publishes after every step and
// idle poll: one entry per task, and readiness.
type opsSnapshot struct {
	tasks []taskSnapshot
	ready bool
	why   string // why not ready
}

type taskSnapshot struct {
	stage                                    string
	partition                                int32
	holds                                    []HeldRecord // heads, HeldFor unset (computed on read)
	held                                     int
	delivered, replays, ticks, sweepsSkipped uint64
	stampOffsets, stampSeqs                  int
}

// wireOps resolves what depends on the application ID (tick topics) and
// checks that no stage consumes or sends to another stage's tick topic.
func (a *App) wireOps() error {
	a.ops.tickTopic = make([]string, len(a.stages))
	a.ops.tickBind = make([]*binding, len(a.stages))
	a.ops.latency = newStepLatency(a.cfg.ApplicationID)
	ticks := make(map[string]string)
	for i, s := range a.stages {
		if s.tick == nil {
			continue
		}
		name := TickTopic(a.cfg.ApplicationID, s.name)
		a.ops.tickTopic[i] = name
		a.ops.tickBind[i] = &binding{topic: name, fold: s.tick.fold, tick: true, invoke: s.tick.invoke}
		a.bySource[name] = append(a.bySource[name], i)
		ticks[name] = s.name
	}
	var errs []error
	for _, s := range a.stages {
		for _, b := range s.sources {
			if owner, ok := ticks[b.topic]; ok {
				errs = append(errs, fmt.Errorf("%w: stage %q consumes %q, the tick topic of stage %q", ErrInvalidConfig, s.name, b.topic, owner))
			}
		}
		for _, k := range s.sinks {
			if owner, ok := ticks[k.topicName()]; ok {
				errs = append(errs, fmt.Errorf("%w: stage %q sends to %q, the tick topic of stage %q", ErrInvalidConfig, s.name, k.topicName(), owner))
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	a.ops.snap.Store(&opsSnapshot{why: "not started"})
	return nil
}

// opsDue reports whether some built task has a tick or a sweep due, so
// the loop runs a step although nothing was fetched.
func (a *App) opsDue() bool {
	now := a.cfg.WallClock()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range a.tasks {
		if t.node != nil && (t.tickDue(now) || t.sweepDue(now)) {
			return true
		}
	}
	return false
}

// inStep runs a task's tick inside the open step, after the step's
// records were fed, so the tick claims them; it commits or aborts with the
// step. (The truncation sweep runs before feeding: sweepIfDue.)
func (t *task) inStep(ctx context.Context, sess *kgo.GroupTransactSession) error {
	if t.node == nil {
		return nil
	}
	now := t.app.cfg.WallClock()
	if t.tickDue(now) {
		if err := t.emitTick(ctx, sess, now); err != nil {
			return err
		}
	}
	return nil
}

// opsBuilt records that the task's node was (re)built, scheduling its first
// tick and sweep one interval from the first build.
func (t *task) opsBuilt() {
	now := t.app.cfg.WallClock()
	if !t.ops.built {
		t.ops.built = true
		if t.st.tick != nil {
			t.ops.nextTick = now.Add(t.st.tick.every)
		}
		if t.app.cfg.TruncateInterval > 0 {
			t.ops.nextSweep = now.Add(t.app.cfg.TruncateInterval)
		}
	}
	t.ops.base = protocol.Counters{}
}

// opsCommitted folds a committed step into the task's counts and
// schedules.
func (t *task) opsCommitted() {
	if t.node != nil {
		c := t.node.Counters()
		t.ops.delivered += c.Delivered - t.ops.base.Delivered
		t.ops.replays += c.ReplaysSkipped - t.ops.base.ReplaysSkipped
		t.ops.base = c
	}
	if t.ops.tickPending {
		t.ops.ticks++
		t.ops.nextTick = t.ops.tickAt.Add(t.st.tick.every)
		t.ops.tickPending = false
	}
	if t.ops.swept {
		t.ops.nextSweep = t.ops.sweptAt.Add(t.app.cfg.TruncateInterval)
		t.ops.swept = false
	}
}

// opsAborted forgets the open step's tick and sweep: the rebuilt node
// redoes them.
func (t *task) opsAborted() {
	t.ops.tickPending = false
	t.ops.swept = false
	t.ops.base = protocol.Counters{}
}

// stepEnded runs when App.step returns: it records the step metrics and
// publishes a fresh snapshot.
func (a *App) stepEnded(start time.Time, committed bool) {
	a.ops.latency.observe(time.Since(start))
	if committed {
		a.ops.commits.Add(1)
	} else {
		a.ops.aborts.Add(1)
	}
	a.observe()
}

// observe runs on the session goroutine between steps: it samples every
// task's holds and counters, warns about holds that outlived
// HoldWarningAfter, and publishes the snapshot readers use.
func (a *App) observe() {
	a.ops.beat.Store(time.Now().UnixNano())
	now := a.cfg.WallClock()
	a.amu.Lock()
	settled := a.gen == a.seenGen
	a.amu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	snap := &opsSnapshot{tasks: make([]taskSnapshot, 0, len(a.tasks)), ready: a.ready.Load() && settled}
	if !snap.ready {
		snap.why = "joining the group"
	}
	for _, id := range a.sortedIDs() {
		t := a.tasks[id]
		if !t.ops.built && snap.ready {
			snap.ready = false
			snap.why = fmt.Sprintf("task %s/%d restoring", t.st.name, t.partition)
		}
		snap.tasks = append(snap.tasks, t.sample(now))
	}
	a.ops.snap.Store(snap)
}

// sessionEnded publishes that the instance is not ready.
func (a *App) sessionEnded() {
	a.ops.snap.Store(&opsSnapshot{why: "rejoining after a client failure"})
}

func (a *App) sortedIDs() []taskID {
	ids := make([]taskID, 0, len(a.tasks))
	for id := range a.tasks {
		ids = append(ids, id)
	}
	sortTaskIDs(ids)
	return ids
}

func sortTaskIDs(ids []taskID) {
	slices.SortFunc(ids, func(x, y taskID) int {
		if c := cmp.Compare(x.stage, y.stage); c != 0 {
			return c
		}
		return cmp.Compare(x.partition, y.partition)
	})
}
