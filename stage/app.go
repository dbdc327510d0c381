package stage

// The App: its construction, lifecycle and the client loop that rebuilds
// a failed client and rejoins.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/parsley-go/parsley/headers"
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
type App struct {
	cfg    Config
	stages []*Stage
	log    *slog.Logger

	bySource map[string][]int // source topic -> stage indexes
	topics   map[string]topicMeta
	idName   map[headers.TopicID]string

	admin *kadm.Client
	boot  *kgo.Client

	// assignment, written by the group's callbacks
	amu      sync.Mutex
	assigned map[string][]int32
	gen      uint64
	seenGen  uint64

	// tasks, read by ExplainHolds
	mu    sync.Mutex
	tasks map[taskID]*task

	pmu     sync.Mutex
	prodErr error

	running atomic.Bool
	steps   atomic.Int64 // committed steps
	ready   atomic.Bool
	xfails  uint // consecutive steps whose external sinks did not settle

	hooks hooks

	ops appOps // ticks, hold diagnosis, metrics, health (ops.go)

	scope scopeWarnings // deliveries claiming causes another task consumes (scope.go)
}

// hooks are test seams. Each is nil in production.
type hooks struct {
	// beforeEnd runs before the step's End; returning true aborts the step.
	beforeEnd func(step int64) bool
	// session wraps the group session before use (fault injection).
	onSession func(*kgo.GroupTransactSession)
	// afterCommit runs after a committed step's stores are written.
	afterCommit func()
	// afterAbort runs after a step that did not commit.
	afterAbort func()
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
		bySource: make(map[string][]int),
		assigned: make(map[string][]int32),
		tasks:    make(map[taskID]*task),
	}
	for i, s := range stages {
		for _, b := range s.sources {
			a.bySource[b.topic] = append(a.bySource[b.topic], i)
		}
	}
	if err := a.wireOps(); err != nil {
		return nil, err
	}
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
	if !a.running.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: App.Run called twice", ErrInvalidConfig)
	}
	a.ops.started.Store(true)
	defer a.ops.stopped.Store(true)
	boot, err := kgo.NewClient(a.baseOpts()...)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	defer boot.Close()
	a.boot, a.admin = boot, kadm.NewClient(boot)
	if err := errors.Join(a.checkTopology(ctx), a.checkTickTopics(ctx)); err != nil {
		return err
	}
	if err := os.MkdirAll(a.cfg.StateDir, 0o755); err != nil {
		return fmt.Errorf("stage: state dir: %w", err)
	}
	defer a.closeTasks()
	for {
		err := a.session(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if f := (*fatal)(nil); errors.As(err, &f) {
			return f.err
		}
		a.log.Warn("stage: client failed; rebuilding it and rejoining", "err", err)
		if sleep(ctx, a.cfg.RetryBackoff) != nil {
			return nil
		}
	}
}

// CommittedSteps returns how many steps this instance committed.
func (a *App) CommittedSteps() int64 { return a.steps.Load() }

// Ready reports whether the instance joined its group and restored its
// tasks at least once.
func (a *App) Ready() bool { return a.ready.Load() }
