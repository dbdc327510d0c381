package stage

// The App: its construction, lifecycle and the client loop that rebuilds
// a failed client and rejoins.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/state"
	"github.com/parsley-go/parsley/internal/wait"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Run runs the stages until ctx ends: New, then App.Run.
func Run(ctx context.Context, cfg Config, stages ...*Stage) error {
	a, err := New(cfg, stages...)
	if err != nil {
		return err
	}
	return a.Run(ctx)
}

// App is a running (or runnable) application: a handle for diagnostics
// while Run is in progress.
//
// App is the session loop (Run, session.go) composing parts, each its own
// type stating its concurrency rule once. Run's goroutine owns every part
// and calls their methods without a lock. What other goroutines touch is
// named at its type and locks or is atomic: franz-go's group callbacks
// write the assignment, its produce promises the open step's results
// (sendResults), the balancer the standby host (standbyHost); the
// collector reads the scope warnings. Readers (Tasks, ExplainHolds, the
// collector, the health handler) read only the status and the snapshot
// the loop publishes there after every step and idle poll (snapshot.go),
// and never wait for a step.
type App struct {
	cfg    Config   // read-only once New returns
	stages []*Stage // read-only
	log    *slog.Logger
	topo   topology // the topics and the clients resolving them: read-only once Run has checked them (topology.go)

	asg     *assignment   // what the group assigned (assignment.go)
	client  clientState   // what the loop did to the current client (session.go)
	tasks   *taskSet      // the open tasks and their restores (taskset.go)
	env     *taskEnv      // what tasks use of the App, built at Run (env.go)
	steps   stepState     // what a step needs beside the tasks (step.go)
	txn     *txnEnder     // ends the transactions, built at Run (txnend.go)
	standby *standbys     // standby tasks, built at Run (standby.go)
	scope   scopeWarnings // deliveries claiming causes another task consumes (scope.go)
	status  status        // what other goroutines read (snapshot.go)
	hooks   hooks         // test seams, set before Run
}

// hooks are test seams. Each is nil in production.
type hooks struct {
	// beforeEnd runs before the step's End; returning true aborts the step.
	beforeEnd func(step int64) bool
	// onSession sees the group session before use (fault injection).
	onSession func(*kgo.GroupTransactSession)
	// afterCommit runs after a committed step's stores are written.
	afterCommit func()
	// afterAbort runs after a step that did not commit.
	afterAbort func()
	// filled runs on the session loop when a step's polling ends, with the
	// polls and records the step takes.
	filled func(polls, records int)
	// idle runs on the session loop at every poll that needs no step.
	idle func()
	// opened runs on the session loop when a task is opened.
	opened func(stage string, partition int32)
	// restore runs on a task's restore goroutine before it restores.
	restore func(ctx context.Context, stage string, partition int32)
	// restored runs on a task's restore goroutine after it restored,
	// while the goroutine still owns the store.
	restored func(stage string, partition int32, res state.Restored, err error, kv *state.Store)
	// standbyProgress runs on a standby's goroutine after every poll.
	standbyProgress func(ctx context.Context, stage string, partition int32, p state.TailProgress)
}

type topicMeta struct {
	id         headers.TopicID
	partitions int32
}

type taskID struct {
	stage     int
	partition int32
}

// New validates cfg and the stages and returns an application ready to Run.
// It does no I/O.
func New(cfg Config, stages ...*Stage) (*App, error) {
	if err := cfg.validate(stages); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	a := &App{
		cfg: c, stages: stages, log: c.Logger,
		topo:  topology{bySource: make(map[string][]int)},
		asg:   newAssignment(),
		tasks: newTaskSet(),
	}
	a.steps.ahead.workers = min(c.DecodeAhead, runtime.GOMAXPROCS(0)-1) // a worker needs a core of its own
	for i, s := range stages {
		for _, b := range s.sources {
			a.topo.bySource[b.topic] = append(a.topo.bySource[b.topic], i)
		}
	}
	if err := a.wireTicks(); err != nil {
		return nil, err
	}
	a.status.latency = newStepLatency(c.ApplicationID)
	a.status.snap.Store(&snapshot{why: "not started"})
	return a, nil
}

// fatal marks an error that stops Run; any other error from a session is
// recovered by building a new client and rejoining.
type fatal struct{ err error }

func (f *fatal) Error() string { return f.err.Error() }
func (f *fatal) Unwrap() error { return f.err }

// Run runs the application until ctx ends, then finishes or aborts the
// current step, leaves the group, closes the stores and returns nil. It
// returns early with an error when a startup check fails, when a step fails
// under StopOnError, or when a store cannot be restored or written. A
// fenced producer, a timed-out transaction or a lost connection is not such
// an error: Run builds a new client and rejoins. Run may be called once.
func (a *App) Run(ctx context.Context) error {
	if !a.status.running.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: App.Run called twice", ErrInvalidConfig)
	}
	a.status.started.Store(true)
	defer a.status.stopped.Store(true)
	boot, err := a.newClient()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	defer boot.Close()
	a.topo.admin, a.topo.boot = kadm.NewClient(boot), boot
	if err := errors.Join(a.checkTopology(ctx), a.checkTickTopics(ctx)); err != nil {
		return err
	}
	a.env = a.newTaskEnv()
	a.txn = a.newTxnEnder()
	a.standby = a.newStandbys()
	if err := os.MkdirAll(filepath.Join(a.cfg.StateDir, a.cfg.ApplicationID), 0o755); err != nil {
		return fmt.Errorf("stage: state dir: %w", err)
	}
	defer a.closeTasks()
	defer a.steps.ahead.close()
	for {
		err := a.session(ctx)
		if ctx.Err() != nil {
			a.leaveGroup()
			return nil
		}
		if f := (*fatal)(nil); errors.As(err, &f) {
			return f.err
		}
		a.log.Warn("stage: client failed; rebuilding it and rejoining", "err", err)
		if wait.Sleep(ctx, a.cfg.RetryBackoff) != nil {
			return nil
		}
	}
}

// leaveGroup removes this static member from the group when
// Config.LeaveOnShutdown asks for it (scale-in). The session has closed:
// its open step ended first.
func (a *App) leaveGroup() {
	if !a.cfg.LeaveOnShutdown {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := a.topo.admin.LeaveGroup(ctx, kadm.LeaveGroup(a.cfg.ApplicationID).InstanceIDs(a.cfg.InstanceID))
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		a.log.Warn("stage: could not leave the group; the instance's tasks move after the session timeout", "instance", a.cfg.InstanceID, "err", err)
	}
}

// CommittedSteps returns how many steps this instance committed.
func (a *App) CommittedSteps() int64 { return a.status.committed.Load() }

// Ready is Readiness without the reason: the one readiness of an instance
// (joined, and every assigned task restored and processing), as /readyz
// serves it.
func (a *App) Ready() bool {
	ok, _ := a.Readiness()
	return ok
}
