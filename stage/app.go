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
// App is the session loop (Run, session.go, step.go) composing parts, each
// its own type stating its concurrency rule once. Run's goroutine owns
// every part and calls their methods without a lock; it reaches the tasks
// only through the task manager (taskmanager.go), which owns them and
// every change to their set. What other goroutines touch is named at its
// type and locks or is atomic: franz-go's group callbacks and the balancer
// write the ownership (ownership.go) and the standby host (standbyHost),
// its produce promises the open step's results (sendResults); restore and
// standby jobs own their store until done (jobs.go); the collector reads
// the scope warnings. Readers (Tasks, ExplainHolds, the collector, the
// health handler) read only the status and the snapshot the loop publishes
// there after every step and idle poll (snapshot.go), and never wait for a
// step.
type App struct {
	cfg    Config   // read-only once New returns
	stages []*Stage // read-only
	log    *slog.Logger
	topo   topology // the topics and the clients resolving them: read-only once Run has checked them (topology.go)

	own       *ownership    // what the group holds for this member (ownership.go)
	tm        *taskManager  // the tasks, built at Run (taskmanager.go)
	env       *taskEnv      // what tasks use of the App, built at Run (env.go)
	cluster   cluster       // the brokers beside the session, set at Run (cluster.go)
	positions positions     // where the session consumes (positions.go)
	steps     stepState     // what a step needs beside the tasks (step.go)
	txn       *txnEnder     // ends the transactions, built at Run (txnend.go)
	scope     scopeWarnings // deliveries claiming causes another task consumes (scope.go)
	status    status        // what other goroutines read (snapshot.go)

	// dial builds each session's client (dialKafka), sleep waits between
	// retries (wait.Sleep) and jobs runs restores and standbys (goJobs):
	// the host simulator replaces all three.
	dial  func(context.Context) (groupSession, error)
	sleep func(context.Context, time.Duration) error
	jobs  jobRunner
	hooks hooks // test seams, set before Run
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
	// restore runs on a task's restore job before it restores.
	restore func(ctx context.Context, stage string, partition int32)
	// restored runs on a task's restore job after it restored, while the
	// job still owns the store.
	restored func(stage string, partition int32, res state.Restored, err error, kv *state.Store)
	// standbyProgress runs on a standby's job after every poll.
	standbyProgress func(ctx context.Context, stage string, partition int32, p state.TailProgress)
	// phase runs on the session loop at the points of a reconcile where
	// the group may act meanwhile (taskManager.phase): the host simulator
	// yields there.
	phase func(name string)
	// built runs when Run has built the task manager.
	built func(*taskManager)
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
		topo:  topology{appID: c.ApplicationID, stages: stages, bySource: make(map[string][]int)},
		own:   newOwnership(),
		sleep: wait.Sleep,
		jobs:  goJobs{},
	}
	a.dial = a.dialKafka
	a.steps.ahead.workers = c.DecodeAhead
	a.steps.external = newExternals(stages)
	for i, s := range stages {
		for _, b := range s.sources {
			a.topo.bySource[b.topic] = append(a.topo.bySource[b.topic], i)
		}
	}
	if err := a.topo.wireTicks(); err != nil {
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
	if err := errors.Join(a.topo.checkTopology(ctx), a.topo.checkTickTopics(ctx)); err != nil {
		return err
	}
	a.cluster = &kafkaCluster{
		Client: a.topo.admin, boot: boot, newClient: a.newClient,
		topics: a.topo.topics, names: a.topo.idName,
		appID: a.cfg.ApplicationID, instance: a.cfg.InstanceID,
		bySource: a.topo.bySource, stages: a.stages, log: a.log,
	}
	return a.serve(ctx)
}

// serve builds the parts that need the resolved topology and the cluster,
// and runs sessions until ctx ends or one fails for good.
func (a *App) serve(ctx context.Context) error {
	a.build()
	if err := os.MkdirAll(filepath.Join(a.cfg.StateDir, a.cfg.ApplicationID), 0o755); err != nil {
		return fmt.Errorf("stage: state dir: %w", err)
	}
	defer a.tm.closeAll()
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
		if a.sleep(ctx, a.cfg.RetryBackoff) != nil {
			return nil
		}
	}
}

// build makes the parts that need the resolved topology and the cluster.
func (a *App) build() {
	c := &a.cfg
	a.env = &taskEnv{
		appID:            c.ApplicationID,
		clock:            c.WallClock,
		truncateEvery:    c.TruncateInterval,
		holdWarningAfter: c.HoldWarningAfter,
		log:              a.log,
		topics:           a.topo.topics,
		names:            a.topo.idName,
		offsets:          brokerOffsets{admin: a.cluster, names: a.topo.idName},
		sent:             &a.steps.sent,
		scope:            &a.scope,
		tracing:          newTracing(c),
	}
	a.txn = &txnEnder{
		group: c.ApplicationID, log: a.log, cluster: a.cluster, own: a.own,
		freshAtLogStart: startsAtLogStart(c.ClientOpts),
		uncommitted:     make(map[topicPartition]bool),
	}
	a.txn.sab = a.own.sab
	a.positions = positions{group: c.ApplicationID, cluster: a.cluster, txn: a.txn, log: a.log}
	files := storeFiles{stateDir: c.StateDir, appID: c.ApplicationID, cacheBytes: c.StateCache, cluster: a.cluster, log: a.log}
	a.tm = &taskManager{
		stages: a.stages, topo: &a.topo, env: a.env, log: a.log, hooks: &a.hooks,
		own: a.own, jobs: a.jobs,
		restore: func(ctx context.Context, t *task) (state.Restored, error) {
			src := a.cluster.changelog(t.store.changelog, t.partition)
			defer src.Close()
			return state.RestoreFrom(ctx, src, t.store.kv, c.WallClock)
		},
		openStore: files.open,
		standby: &standbys{
			host:       &standbyHost{count: c.Standbys, log: a.log, changed: a.own.bump},
			jobs:       make(map[taskID]*standbyJob),
			retry:      make(map[taskID]time.Time),
			retryAfter: max(5*c.RetryBackoff, time.Second),
			clock:      c.WallClock,
			log:        a.log,
			stages:     a.stages,
			topics:     a.topo.topics,
			files:      files,
			cluster:    a.cluster,
			runner:     a.jobs,
			progress:   a.hooks.standbyProgress,
		},
		tasks:    make(map[taskID]*task),
		restores: make(map[taskID]*restoreJob),
	}
	if a.hooks.built != nil {
		a.hooks.built(a.tm)
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
	if err := a.cluster.leaveGroup(ctx, a.cfg.ApplicationID, a.cfg.InstanceID); err != nil {
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
