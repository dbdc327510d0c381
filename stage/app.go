package stage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/state"
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

func (a *App) baseOpts() []kgo.Opt {
	return append([]kgo.Opt{kgo.SeedBrokers(a.cfg.Brokers...)}, a.cfg.ClientOpts...)
}

func (a *App) sessionOpts() []kgo.Opt {
	var sources []string
	for t := range a.bySource {
		sources = append(sources, t)
	}
	sort.Strings(sources)
	opts := append(a.baseOpts(),
		kgo.TransactionalID(a.cfg.ApplicationID+"-"+a.cfg.InstanceID),
		kgo.ConsumerGroup(a.cfg.ApplicationID),
		kgo.ConsumeTopics(sources...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.Balancers(coPartitioner{}),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.OnPartitionsAssigned(a.onAssigned),
		kgo.OnPartitionsRevoked(a.onRevoked),
		kgo.OnPartitionsLost(a.onRevoked),
	)
	if a.cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(a.cfg.SessionTimeout))
		if hb := a.cfg.SessionTimeout / 3; hb < 3*time.Second {
			opts = append(opts, kgo.HeartbeatInterval(hb))
		}
	}
	if a.cfg.RebalanceTimeout > 0 {
		opts = append(opts, kgo.RebalanceTimeout(a.cfg.RebalanceTimeout))
	}
	if a.cfg.TransactionTimeout > 0 {
		opts = append(opts, kgo.TransactionTimeout(a.cfg.TransactionTimeout))
	}
	return opts
}

func (a *App) onAssigned(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	a.amu.Lock()
	defer a.amu.Unlock()
	for t, ps := range m {
		a.assigned[t] = append(a.assigned[t], ps...)
	}
	a.gen++
}

func (a *App) onRevoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	a.amu.Lock()
	defer a.amu.Unlock()
	for t, ps := range m {
		a.assigned[t] = slices.DeleteFunc(a.assigned[t], func(p int32) bool { return slices.Contains(ps, p) })
		if len(a.assigned[t]) == 0 {
			delete(a.assigned, t)
		}
	}
	a.gen++
}

// session runs one client incarnation until ctx ends or the client fails.
func (a *App) session(ctx context.Context) error {
	sess, err := kgo.NewGroupTransactSession(a.sessionOpts()...)
	if err != nil {
		return &fatal{fmt.Errorf("%w: %w", ErrInvalidConfig, err)}
	}
	if a.hooks.onSession != nil {
		a.hooks.onSession(sess)
	}
	defer func() {
		a.mu.Lock()
		for _, t := range a.tasks {
			t.reset()
		}
		a.mu.Unlock()
		a.amu.Lock()
		clear(a.assigned)
		a.gen++
		a.amu.Unlock()
		sess.Close() // leaves the group
		a.sessionEnded()
	}()
	// Loading the producer ID fences every earlier incarnation of this
	// instance and aborts its open transaction now, so restores do not wait
	// for the transaction timeout.
	if _, _, err := sess.Client().ProducerID(ctx); err != nil {
		return fmt.Errorf("stage: init producer: %w", err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, a.cfg.PollInterval)
		fs := sess.PollRecords(pctx, a.cfg.MaxPollRecords)
		cancel()
		if fs.IsClientClosed() {
			return errors.New("stage: client closed")
		}
		if err := ctx.Err(); err != nil {
			return err // the polled records are fetched again next time
		}
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
				a.log.Warn("stage: fetch error", "topic", t, "partition", p, "err", err)
			}
		})
		if err := a.reconcile(ctx); err != nil {
			return err
		}
		if fs.NumRecords() == 0 && !a.needsStep() && !a.opsDue() {
			a.observe()
			continue
		}
		if err := a.step(ctx, sess, fs); err != nil {
			return err
		}
	}
}

func (a *App) needsStep() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, t := range a.tasks {
		if t.node == nil {
			return true
		}
	}
	return false
}

// reconcile brings the task set in line with the assignment: it closes the
// tasks no longer assigned, opens and restores the new ones, and marks every
// task for a rebuild from committed state (a partition revoked and given
// back may have been processed elsewhere meanwhile).
func (a *App) reconcile(ctx context.Context) error {
	a.amu.Lock()
	gen := a.gen
	want := make(map[taskID]bool)
	for t, ps := range a.assigned {
		for _, si := range a.bySource[t] {
			for _, p := range ps {
				want[taskID{si, p}] = true
			}
		}
	}
	a.amu.Unlock()
	if gen == a.seenGen {
		return nil
	}
	a.mu.Lock()
	for id, t := range a.tasks {
		t.reset()
		if !want[id] {
			t.close()
			delete(a.tasks, id)
		}
	}
	a.mu.Unlock()
	ids := make([]taskID, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(x, y taskID) int {
		if x.stage != y.stage {
			return x.stage - y.stage
		}
		return int(x.partition - y.partition)
	})
	for _, id := range ids {
		a.mu.Lock()
		t := a.tasks[id]
		a.mu.Unlock()
		if t == nil {
			var err error
			if t, err = a.openTask(ctx, id); err != nil {
				return err
			}
			a.mu.Lock()
			a.tasks[id] = t
			a.mu.Unlock()
		}
		newClient := func(opts ...kgo.Opt) (*kgo.Client, error) {
			return kgo.NewClient(append(a.baseOpts(), opts...)...)
		}
		res, err := state.Restore(ctx, a.admin, newClient, t.changelog, t.partition, t.kv, a.cfg.WallClock)
		if res.Wiped {
			// A store slept past the changelog's tombstone retention:
			// replaying from its checkpoint could resurrect deleted keys.
			a.log.Info("stage: task store wiped; restoring from the changelog start",
				"stage", t.st.name, "partition", t.partition, "reason", res.Reason,
				"age", res.Age, "delete_retention", res.Window, "checkpoint", res.From)
		}
		if err != nil {
			if errors.Is(err, state.ErrChangelogBehind) {
				return &fatal{fmt.Errorf("stage %q partition %d: %w", t.st.name, t.partition, err)}
			}
			return fmt.Errorf("stage %q partition %d: restore: %w", t.st.name, t.partition, err)
		}
	}
	a.seenGen = gen
	a.ready.Store(true)
	return nil
}

func (a *App) openTask(ctx context.Context, id taskID) (*task, error) {
	st := a.stages[id.stage]
	path := filepath.Join(a.cfg.StateDir, fmt.Sprintf("%s-%d.db", st.name, id.partition))
	kv, err := state.Open(ctx, path)
	if err != nil {
		return nil, &fatal{fmt.Errorf("stage %q partition %d: %w", st.name, id.partition, err)}
	}
	t := &task{
		app: a, st: st, id: id, partition: id.partition, kv: kv,
		changelog: ChangelogTopic(a.cfg.ApplicationID, st.name),
		byID:      make(map[headers.TopicID]*binding),
		clNext:    -1,
	}
	for i := range st.sources {
		b := &st.sources[i]
		m := a.topics[b.topic]
		ch := headers.Channel{Topic: m.id, Partition: id.partition}
		t.inputs = append(t.inputs, ch)
		t.byID[m.id] = b
	}
	for _, k := range st.sinks {
		t.sinks = append(t.sinks, a.topics[k.topicName()].id)
	}
	a.openTicks(t)
	return t, nil
}

func (a *App) closeTasks() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for id, t := range a.tasks {
		t.close()
		delete(a.tasks, id)
	}
}

// step runs one transaction: rebuild the nodes that need it, feed the
// fetched records, run user logic, send stamped emissions and the
// changelog, and end the transaction. After a commit the stores are
// written; otherwise every task's node is rebuilt from committed state and
// the client rewinds to the committed offsets.
func (a *App) step(ctx context.Context, sess *kgo.GroupTransactSession, fs kgo.Fetches) error {
	committed := false
	defer func(start time.Time) { a.stepEnded(start, committed) }(time.Now())
	// Taken before the step writes anything: no changelog record past the
	// checkpoints this step commits was written before it.
	began := a.cfg.WallClock()
	// The step runs to its end even if ctx ends meanwhile: a half-done
	// step is aborted, never committed.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.stepTimeout())
	defer cancel()
	if err := sess.Begin(); err != nil {
		return fmt.Errorf("stage: begin transaction: %w", err)
	}
	a.pmu.Lock()
	a.prodErr = nil
	a.pmu.Unlock()
	a.beginExternal(sctx)

	a.mu.Lock()
	stepErr := a.runStep(sctx, sess, fs)
	a.mu.Unlock()

	ferr := sess.Client().Flush(sctx)
	a.pmu.Lock()
	perr := a.prodErr
	a.pmu.Unlock()
	commit := stepErr == nil && ferr == nil && perr == nil
	var xerr error
	if commit {
		xerr = a.settleExternal(sctx)
		commit = xerr == nil
	}
	if commit && a.hooks.beforeEnd != nil && a.hooks.beforeEnd(a.steps.Load()) {
		commit = false
	}
	var endErr error
	committed, endErr = sess.End(sctx, kgo.TransactionEndTry(commit))

	a.mu.Lock()
	defer a.mu.Unlock()
	if committed && endErr == nil {
		for _, t := range a.tasks {
			if err := t.commit(sctx, began); err != nil {
				return &fatal{err}
			}
			t.opsCommitted()
		}
		a.steps.Add(1)
		a.xfails = 0
		if a.hooks.afterCommit != nil {
			a.hooks.afterCommit()
		}
		return nil
	}
	for _, t := range a.tasks {
		t.reset()
	}
	if a.hooks.afterAbort != nil {
		a.hooks.afterAbort()
	}
	if endErr != nil {
		return fmt.Errorf("stage: end transaction: %w", endErr)
	}
	if perr != nil || ferr != nil {
		return fmt.Errorf("stage: produce: %w", errors.Join(perr, ferr))
	}
	if stepErr != nil {
		if f := (*fatal)(nil); errors.As(stepErr, &f) {
			return f
		}
		var se *StepError
		if !errors.As(stepErr, &se) {
			// A host failure (a broker answer, an assignment not seen
			// yet): retry from committed state with the same client.
			a.log.Warn("stage: step aborted; retrying", "err", stepErr)
			return sleep(ctx, a.cfg.RetryBackoff)
		}
		if a.cfg.OnStepError == StopOnError {
			return &fatal{stepErr}
		}
		a.log.Error("stage: step failed; retrying from committed state", "err", stepErr)
		return sleep(ctx, a.cfg.RetryBackoff)
	}
	if xerr != nil {
		d := a.externalBackoff()
		a.log.Warn("stage: external sink did not settle; retrying the step from committed state", "err", xerr, "backoff", d)
		return sleep(ctx, d)
	}
	return nil // aborted by a rebalance or a hook: reprocess
}

func (a *App) stepTimeout() time.Duration {
	if a.cfg.TransactionTimeout > 0 {
		return 2 * a.cfg.TransactionTimeout
	}
	return time.Minute
}

func (a *App) promise(_ *kgo.Record, err error) {
	if err != nil {
		a.pmu.Lock()
		if a.prodErr == nil {
			a.prodErr = err
		}
		a.pmu.Unlock()
	}
}

// runStep does the work of a step inside the transaction. a.mu is held.
func (a *App) runStep(ctx context.Context, sess *kgo.GroupTransactSession, fs kgo.Fetches) error {
	ids := make([]taskID, 0, len(a.tasks))
	for id := range a.tasks {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(x, y taskID) int {
		if x.stage != y.stage {
			return x.stage - y.stage
		}
		return int(x.partition - y.partition)
	})
	var starts map[string]map[int32]int64
	for _, id := range ids {
		t := a.tasks[id]
		if t.node != nil {
			t.sweepIfDue(ctx) // before feeding, so the step's stamps are swept
			continue
		}
		if starts == nil {
			need := make(map[string][]int32)
			for _, id := range ids {
				if a.tasks[id].node == nil {
					for _, b := range a.tasks[id].st.sources {
						need[b.topic] = append(need[b.topic], id.partition)
					}
					if tk := a.ops.tickTopic[id.stage]; tk != "" {
						need[tk] = append(need[tk], id.partition) // ticks.go
					}
				}
			}
			var err error
			if starts, err = a.startPositions(ctx, need); err != nil {
				return err
			}
		}
		if err := t.build(ctx, sess, starts); err != nil {
			return err
		}
	}
	for _, f := range fs {
		for _, ft := range f.Topics {
			for _, fp := range ft.Partitions {
				if len(fp.Records) == 0 {
					continue
				}
				for _, si := range a.bySource[ft.Topic] {
					t := a.tasks[taskID{si, fp.Partition}]
					if t == nil || t.node == nil {
						// Fetched before the assignment reached us: abort
						// rather than commit its offset unprocessed.
						return fmt.Errorf("stage: records of %s[%d] without a task", ft.Topic, fp.Partition)
					}
					if err := t.feed(ctx, sess, ft.Topic, fp.Records); err != nil {
						return err
					}
				}
			}
		}
	}
	for _, id := range ids {
		if err := a.tasks[id].inStep(ctx, sess); err != nil {
			return err
		}
		if err := a.tasks[id].flush(ctx, sess); err != nil {
			return err
		}
	}
	return nil
}

// startPositions returns, per source partition of the tasks in need,
// where this incarnation starts consuming: the group's committed offset, or
// the log start when there is none or it is lower (host duties H5, H6). A
// committed offset still pending in another instance's transaction may read
// lower than it will be; a lower start only claims less, so it is safe.
func (a *App) startPositions(ctx context.Context, need map[string][]int32) (map[string]map[int32]int64, error) {
	var sources []string
	for t := range need {
		sources = append(sources, t)
	}
	sort.Strings(sources)
	committed, err := a.admin.FetchOffsets(ctx, a.cfg.ApplicationID)
	if err != nil {
		return nil, fmt.Errorf("stage: fetch committed offsets: %w", err)
	}
	logStarts, err := a.admin.ListStartOffsets(ctx, sources...)
	if err != nil {
		return nil, fmt.Errorf("stage: list log starts: %w", err)
	}
	out := make(map[string]map[int32]int64)
	for _, t := range sources {
		out[t] = make(map[int32]int64)
		for _, p := range need[t] {
			ls, ok := logStarts.Lookup(t, p)
			if !ok || ls.Err != nil {
				return nil, fmt.Errorf("stage: log start of %s[%d]: %v", t, p, ls.Err)
			}
			pos := ls.Offset
			c, ok := committed.Lookup(t, p)
			if ok && c.Err != nil {
				return nil, fmt.Errorf("stage: committed offset of %s[%d]: %w", t, p, c.Err)
			}
			if ok && c.At > pos {
				pos = c.At
			}
			out[t][p] = pos
		}
	}
	return out, nil
}

// checkTopology resolves every declared topic and checks the cluster
// matches the stages: every source, sink and changelog exists; a stage's
// sources agree on the partition count; its changelog has that many
// partitions. It reports every problem at once.
func (a *App) checkTopology(ctx context.Context) error {
	var names []string
	seen := make(map[string]bool)
	add := func(n string) {
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	for _, s := range a.stages {
		for _, b := range s.sources {
			add(b.topic)
		}
		for _, k := range s.sinks {
			add(k.topicName())
		}
		add(ChangelogTopic(a.cfg.ApplicationID, s.name))
	}
	md, err := a.admin.Metadata(ctx, names...)
	if err != nil {
		return fmt.Errorf("stage: metadata: %w", err)
	}
	a.topics = make(map[string]topicMeta)
	a.idName = make(map[headers.TopicID]string)
	var errs []error
	var missing []string
	for _, n := range names {
		td, ok := md.Topics[n]
		if !ok || td.Err != nil || len(td.Partitions) == 0 {
			missing = append(missing, n)
			continue
		}
		id := headers.TopicID(td.ID)
		a.topics[n] = topicMeta{id: id, partitions: int32(len(td.Partitions))}
		a.idName[id] = n
	}
	if len(missing) > 0 {
		errs = append(errs, fmt.Errorf("%w: missing topics %q", ErrTopology, missing))
	}
	for _, s := range a.stages {
		var parts int32 = -1
		var first string
		counts := ""
		agree := true
		for _, b := range s.sources {
			m, ok := a.topics[b.topic]
			if !ok {
				continue
			}
			counts += fmt.Sprintf(" %s=%d", b.topic, m.partitions)
			if parts < 0 {
				parts, first = m.partitions, b.topic
			} else if m.partitions != parts {
				agree = false
			}
		}
		if !agree {
			errs = append(errs, fmt.Errorf("%w: stage %q: sources must have equal partition counts to be co-partitioned; have%s", ErrTopology, s.name, counts))
			continue
		}
		cl := ChangelogTopic(a.cfg.ApplicationID, s.name)
		if m, ok := a.topics[cl]; ok && parts > 0 && m.partitions != parts {
			errs = append(errs, fmt.Errorf("%w: stage %q: changelog %q has %d partitions, sources (%s) have %d", ErrTopology, s.name, cl, m.partitions, first, parts))
		}
	}
	errs = append(errs, a.checkCompacted(ctx)...)
	return errors.Join(errs...)
}

// checkCompacted refuses changelogs that are not compacted: under the
// delete policy retention would silently drop state a restore needs.
func (a *App) checkCompacted(ctx context.Context) []error {
	var names []string
	for _, s := range a.stages {
		if n := ChangelogTopic(a.cfg.ApplicationID, s.name); a.topics[n].partitions > 0 {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil
	}
	rcs, err := a.admin.DescribeTopicConfigs(ctx, names...)
	if err != nil {
		return []error{fmt.Errorf("stage: describe changelog configs: %w", err)}
	}
	var errs []error
	for _, rc := range rcs {
		if rc.Err != nil {
			errs = append(errs, fmt.Errorf("stage: describe configs of %q: %w", rc.Name, rc.Err))
			continue
		}
		policy := "delete"
		for _, c := range rc.Configs {
			if c.Key == "cleanup.policy" && c.Value != nil {
				policy = *c.Value
			}
		}
		if !strings.Contains(policy, "compact") {
			errs = append(errs, fmt.Errorf("%w: changelog %q has cleanup.policy=%s; it must be compact", ErrTopology, rc.Name, policy))
		}
	}
	return errs
}

type brokerOffsets struct{ a *App }

func (b brokerOffsets) EndOffsets(ctx context.Context, id headers.TopicID) ([]int64, bool, error) {
	return b.a.listOffsets(ctx, id, b.a.admin.ListEndOffsets)
}

func (b brokerOffsets) LogStarts(ctx context.Context, id headers.TopicID) ([]int64, bool, error) {
	return b.a.listOffsets(ctx, id, b.a.admin.ListStartOffsets)
}

func (a *App) listOffsets(ctx context.Context, id headers.TopicID, list func(context.Context, ...string) (kadm.ListedOffsets, error)) ([]int64, bool, error) {
	name, ok := a.idName[id]
	if !ok {
		// A former sink: look it up among all topics.
		md, err := a.admin.Metadata(ctx)
		if err != nil {
			return nil, false, err
		}
		for n, td := range md.Topics {
			if headers.TopicID(td.ID) == id {
				name, ok = n, true
			}
		}
		if !ok {
			return nil, false, nil
		}
	}
	l, err := list(ctx, name)
	if err != nil {
		return nil, false, err
	}
	if err := l.Error(); err != nil {
		return nil, false, fmt.Errorf("list offsets of %s: %w", name, err)
	}
	ps := l[name]
	out := make([]int64, len(ps))
	for p, o := range ps {
		if int(p) < len(out) {
			out[p] = o.Offset
		}
	}
	return out, true, nil
}

// TaskInfo describes a task this instance runs.
type TaskInfo struct {
	Stage     string
	Partition int32
	Held      int // records waiting at the gate (0 while the task rebuilds)
}

// Tasks returns the tasks this instance runs, sorted.
func (a *App) Tasks() []TaskInfo {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []TaskInfo
	for _, t := range a.tasks {
		ti := TaskInfo{Stage: t.st.name, Partition: t.partition}
		if t.node != nil {
			ti.Held = t.node.Counters().Held
		}
		out = append(out, ti)
	}
	slices.SortFunc(out, func(x, y TaskInfo) int {
		if x.Stage != y.Stage {
			if x.Stage < y.Stage {
				return -1
			}
			return 1
		}
		return int(x.Partition - y.Partition)
	})
	return out
}

// CommittedSteps returns how many steps this instance committed.
func (a *App) CommittedSteps() int64 { return a.steps.Load() }

// Ready reports whether the instance joined its group and restored its
// tasks at least once.
func (a *App) Ready() bool { return a.ready.Load() }

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
