package stage

// The task manager: the one owner of this instance's tasks and of every
// change to their set.

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/parsley-go/parsley/internal/state"
)

// taskManager owns the tasks this instance runs and every change to that
// set: it opens them, restores their stores off the step path, closes them,
// promotes standby copies, and reconciles the set with what the group holds
// for this member (ownership), generation by generation. The session loop
// owns it and alone calls its methods, without a lock; the loop reaches a
// task only through it. A restore's or a standby's job owns its store until
// the job is done (jobRunner); other goroutines read only the snapshot the
// loop publishes (snapshot.go).
//
// A task runs on only while every partition it consumes has been held here
// without a break since the task was opened: held records the epochs it
// was opened under, and a partition that left and came back holds a new
// one (ownership.go). A task that cannot go on is closed, and opened and
// restored again if the member may still run it.
type taskManager struct {
	stages []*Stage
	topo   *topology
	env    *taskEnv
	log    *slog.Logger
	hooks  *hooks
	own    *ownership
	jobs   jobRunner
	// restore brings a task's store up to date with its changelog, on the
	// restore's job.
	restore func(ctx context.Context, t *task) (state.Restored, error)
	// openStore opens (moving a legacy file first) the store of a task.
	openStore func(ctx context.Context, st *Stage, p int32) (*state.Store, error)
	standby   *standbys // standby copies kept here (standby.go)

	tasks    map[taskID]*task
	restores map[taskID]*restoreJob // restores in progress

	sab sabotageSet // empty outside verification builds (sabotage.go)

	seen     uint64             // the ownership version the last reconcile read
	repause  bool               // a restore ended: reconcile recomputes what is fetched
	paused   map[string][]int32 // assigned partitions not fetched
	rejoined bool               // this session asked the group to rebalance once
	ready    bool               // a reconcile ran this session
}

// restoreJob is one task's restore: until its job is done it owns the
// task's store.
type restoreJob struct {
	job job
	res state.Restored
	err error
}

// fetchControl is what reconcile asks of the session's client.
type fetchControl interface {
	PauseFetchPartitions(map[string][]int32)
	ResumeFetchPartitions(map[string][]int32)
	ForceRebalance()
}

// stageTopics returns the topics a stage's tasks consume: its sources and
// its tick topic.
func (m *taskManager) stageTopics(si int) []string {
	var ts []string
	for _, b := range m.stages[si].sources {
		ts = append(ts, b.topic)
	}
	if tk := m.topo.tickTopic[si]; tk != "" {
		ts = append(ts, tk)
	}
	return ts
}

// sortedIDs returns the open tasks' IDs in task order.
func (m *taskManager) sortedIDs() []taskID {
	return slices.SortedFunc(maps.Keys(m.tasks), compareTaskIDs)
}

// restoring reports whether the task's store is being restored.
func (m *taskManager) restoring(id taskID) bool { return m.restores[id] != nil }

// isOpen reports whether the task is open here.
func (m *taskManager) isOpen(id taskID) bool { return m.tasks[id] != nil }

// inStep returns the tasks that take part in a step, in task order: every
// open task but those restoring.
func (m *taskManager) inStep() []*task {
	var ts []*task
	for _, id := range m.sortedIDs() {
		if !m.restoring(id) {
			ts = append(ts, m.tasks[id])
		}
	}
	return ts
}

// running returns the built task of stage si at partition p, nil when it
// is not open, restores or has no node yet.
func (m *taskManager) running(si int, p int32) *task {
	if t := m.tasks[taskID{si, p}]; t != nil && t.node != nil {
		return t
	}
	return nil
}

// needsStep reports whether some restored task has no node: a step builds
// it.
func (m *taskManager) needsStep() bool {
	for id, t := range m.tasks {
		if t.node == nil && !m.restoring(id) {
			return true
		}
	}
	return false
}

// timerDue reports whether some built task has a tick or a sweep due at
// now, so the loop runs a step although nothing was fetched.
func (m *taskManager) timerDue(now time.Time) bool {
	for _, t := range m.tasks {
		if t.node != nil && (t.timers.tickDue(now) || t.timers.sweepDue(now)) {
			return true
		}
	}
	return false
}

// changed reports whether the holding changed since the last reconcile.
func (m *taskManager) changed() bool { return m.own.currentVersion() != m.seen }

// settled reports whether a reconcile ran this session and nothing changed
// since.
func (m *taskManager) settled() bool { return m.ready && !m.changed() }

// resetAll drops every task's node after a step that did not commit: each
// is rebuilt from committed state.
func (m *taskManager) resetAll() {
	for _, id := range m.sortedIDs() {
		m.tasks[id].reset()
	}
}

// sessionEnded forgets what the ended session's client did: every task's
// node goes (each is rebuilt from committed state), and the next reconcile
// closes the tasks, which the next session's holding no longer continues.
func (m *taskManager) sessionEnded() {
	m.resetAll()
	clear(m.paused)
	m.rejoined = false
	m.ready = false
}

// commitStep writes every task of a committed step: its store takes in the
// step's writes, and its counts and schedules the step. began is when the
// step began.
func (m *taskManager) commitStep(ctx context.Context, began time.Time) error {
	for _, t := range m.inStep() {
		if err := t.store.commit(ctx, began); err != nil {
			return &fatal{err}
		}
		t.sends.clear()
		t.stepCommitted()
	}
	return nil
}

// runnable returns the tasks this instance may run with the assigned
// partitions, and the assigned partitions it must not fetch.
//
// A task runs only when partition p of every topic it consumes is assigned
// here (host duty: one owner per task; the balancer gives partition p of
// every topic to one member, but during a rolling upgrade that changes a
// stage's sources, or in the round where a partition number moves, a
// member may hold only some of them). And a partition is fetched only when
// every stage reading it runs its task here: committed offsets are shared
// by the stages of one application, so feeding one stage and committing
// would skip the records for the other.
func (m *taskManager) runnable(assigned map[string][]int32) (map[taskID]bool, map[string][]int32) {
	has := make(map[topicPartition]bool)
	for t, ps := range assigned {
		for _, p := range ps {
			has[topicPartition{t, p}] = true
		}
	}
	run := make(map[taskID]bool)
	for tp := range has {
		for _, si := range m.topo.bySource[tp.topic] {
			id := taskID{si, tp.partition}
			if _, seen := run[id]; seen {
				continue
			}
			run[id] = !slices.ContainsFunc(m.stageTopics(si), func(t string) bool { return !has[topicPartition{t, tp.partition}] })
		}
	}
	blocked := make(map[topicPartition]bool)
	for changed := true; changed; {
		changed = false
		for tp := range has {
			if blocked[tp] {
				continue
			}
			stages := m.topo.bySource[tp.topic]
			if !slices.ContainsFunc(stages, func(si int) bool { return !run[taskID{si, tp.partition}] }) {
				continue
			}
			blocked[tp] = true
			changed = true
			for _, si := range stages {
				run[taskID{si, tp.partition}] = false
			}
		}
	}
	want := make(map[taskID]bool)
	for id, ok := range run {
		if ok {
			want[id] = true
		}
	}
	pause := make(map[string][]int32)
	for _, tp := range slices.SortedFunc(maps.Keys(blocked), compareTopicPartition) {
		pause[tp.topic] = append(pause[tp.topic], tp.partition)
	}
	return want, pause
}

// holding returns the epochs of the partitions task id consumes in held,
// and whether every one of them is held.
func (m *taskManager) holding(id taskID, held map[topicPartition]uint64) (map[topicPartition]uint64, bool) {
	out := make(map[topicPartition]uint64)
	for _, t := range m.stageTopics(id.stage) {
		tp := topicPartition{t, id.partition}
		since, ok := held[tp]
		if !ok {
			return nil, false
		}
		out[tp] = since
	}
	return out, true
}

// reconcile brings the task set in line with the holding: it closes the
// tasks no longer runnable here and those whose holding was interrupted
// since they were opened (another instance may have processed them
// meanwhile), opens and restores the new ones, and pauses the assigned
// partitions no task may consume. Tasks held without a break keep their
// node and go on processing (cooperative rebalancing). It reports whether
// it ran: nothing changed since the last run, it does nothing.
func (m *taskManager) reconcile(ctx context.Context, fc fetchControl) (ran bool, err error) {
	version, held := m.own.read()
	if version == m.seen && !m.repause && m.ready {
		return false, nil
	}
	m.repause = false
	assigned := heldByTopic(held)
	want, pause := m.runnable(assigned)
	// Held back by the assignment itself, before the restores add theirs:
	// only these are a reason to rejoin (below).
	heldBack := len(pause) > 0
	for _, id := range m.sortedIDs() {
		if !want[id] || !maps.Equal(m.tasks[id].held, must(m.holding(id, held))) {
			m.close(id)
		}
	}
	// Standbys of tasks that become active here stop first: their store
	// file is the task's (standby.go).
	m.standby.sync(ctx, want, m.isOpen)
	for _, id := range slices.SortedFunc(maps.Keys(want), compareTaskIDs) {
		if m.isOpen(id) {
			continue
		}
		t, err := m.open(ctx, id, must(m.holding(id, held)))
		if err != nil {
			return true, err
		}
		m.startRestore(t)
	}
	if heldBack {
		m.log.Info("stage: partitions held back: a task reading them lacks some of its source partitions here", "partitions", pause)
	}
	// Nothing is fetched for a task that restores, nor for the other
	// stages reading its partitions (they share the group's offsets). Every
	// start restores every task, so this is no news: not logged above.
	for _, tp := range m.restoringPartitions() {
		if slices.Contains(assigned[tp.topic], tp.partition) && !slices.Contains(pause[tp.topic], tp.partition) {
			pause[tp.topic] = append(pause[tp.topic], tp.partition)
		}
	}
	m.setPaused(fc, pause)
	if heldBack && !m.rejoined {
		// A static member that restarts with other sources rejoins under
		// its old member: a Kafka coordinator hands it the assignment
		// planned for its old subscription without a rebalance, and the
		// partitions its new tasks need never come. Rejoining once, now
		// with a known member ID, makes the coordinator see the changed
		// subscription and rebalance; a mixed-version window that holds
		// partitions back by design costs one extra rebalance per session.
		// A task that restores does not count: its partitions are all
		// assigned here, and a rebalance would only stall the group
		// (every member's commit waits for the join to end) while the
		// restore runs.
		m.rejoined = true
		m.log.Info("stage: assignment holds partitions back; asking the group to rebalance once", "partitions", pause)
		fc.ForceRebalance()
	}
	if m.sab.has(sabAbsorbLateChanges) {
		version, held = m.own.read()
		for _, t := range m.tasks {
			if h, ok := m.holding(t.id, held); ok {
				t.held = h
			}
		}
	}
	m.seen = version
	m.ready = true
	return true, nil
}

// must returns the holding, or nil when not all of it is held.
func must(held map[topicPartition]uint64, ok bool) map[topicPartition]uint64 {
	if !ok {
		return nil
	}
	return held
}

// open opens the task's store and its task, which consumes what held
// holds (the epochs it was opened under).
func (m *taskManager) open(ctx context.Context, id taskID, held map[topicPartition]uint64) (*task, error) {
	st := m.stages[id.stage]
	m.phase(fmt.Sprintf("open %s/%d", st.name, id.partition))
	kv, err := m.openStore(ctx, st, id.partition)
	if err != nil {
		return nil, err
	}
	t := newTask(m.env, st, id, kv, m.topo)
	t.held = held
	m.tasks[id] = t
	if m.hooks.opened != nil {
		m.hooks.opened(st.name, id.partition)
	}
	return t, nil
}

// close stops the task's restore, if one runs, and closes and forgets the
// task.
func (m *taskManager) close(id taskID) {
	t := m.tasks[id]
	if t == nil {
		return
	}
	if j := m.restores[id]; j != nil {
		j.job.stop()
		delete(m.restores, id)
	}
	m.phase(fmt.Sprintf("close %s/%d", t.st.name, t.partition))
	t.close()
	delete(m.tasks, id)
}

// closeAll closes every task and standby (Run returns).
func (m *taskManager) closeAll() {
	for _, id := range m.sortedIDs() {
		m.close(id)
	}
	m.standby.stopAll()
}

// phase marks a point of the task set's changes where the host simulator
// may let the group act (hooks.phase).
func (m *taskManager) phase(name string) {
	if m.hooks.phase != nil {
		m.hooks.phase(name)
	}
}

// startRestore restores t's store on a job of its own. The task takes part
// in no step until the restore finishes (finishRestores).
func (m *taskManager) startRestore(t *task) {
	j := &restoreJob{}
	j.job = m.jobs.run("restore "+t.st.name+"/"+fmt.Sprint(t.partition), func(ctx context.Context) {
		if m.hooks.restore != nil {
			m.hooks.restore(ctx, t.st.name, t.partition)
		}
		j.res, j.err = m.restore(ctx, t)
		if m.hooks.restored != nil {
			m.hooks.restored(t.st.name, t.partition, j.res, j.err, t.store.kv)
		}
	})
	m.restores[t.id] = j
}

// finishRestores takes in the restores that ended: a restored task joins
// the next step (reconcile resumes its partitions); a failed one is closed,
// and the error stops Run (a lost changelog, a broker without topic IDs) or
// rebuilds the client, which opens and restores it again.
func (m *taskManager) finishRestores() error {
	var errs []error
	for _, id := range m.sortedIDs() {
		j := m.restores[id]
		if j == nil || !j.job.finished() {
			continue
		}
		delete(m.restores, id)
		m.repause = true
		t := m.tasks[id]
		res, err := j.res, j.err
		switch {
		case res.Reincarnated:
			t.startOver = true
			// The changelog was recreated or this is another cluster:
			// the store's offsets point into a log that no longer
			// exists. Someone should know their state started over.
			m.log.Warn("stage: task store wiped: it mirrors another changelog than this one (topic recreated, or another cluster); restoring from the changelog start",
				"stage", t.st.name, "partition", t.partition, "store", t.store.kv.Path(), "reason", res.Reason,
				"was", res.Previous.String(), "now", res.Changelog.String(), "checkpoint", res.From)
		case res.Wiped:
			// A store slept past the changelog's tombstone retention, or
			// its checkpoint cannot be trusted: replaying from it could
			// resurrect deleted keys.
			m.log.Info("stage: task store wiped; restoring from the changelog start",
				"stage", t.st.name, "partition", t.partition, "store", t.store.kv.Path(), "reason", res.Reason,
				"age", res.Age, "delete_retention", res.Window, "checkpoint", res.From)
		}
		if err == nil {
			continue
		}
		m.close(id)
		// Neither a lost changelog nor a broker without topic IDs gets
		// better by retrying.
		if errors.Is(err, state.ErrChangelogBehind) || errors.Is(err, state.ErrNoTopicID) {
			return &fatal{fmt.Errorf("stage %q partition %d: %w", t.st.name, t.partition, err)}
		}
		errs = append(errs, fmt.Errorf("stage %q partition %d: restore: %w", t.st.name, t.partition, err))
	}
	return errors.Join(errs...)
}

// restoringPartitions returns, sorted, the partitions the restoring tasks
// consume: nothing is fetched from them until the restore ends.
func (m *taskManager) restoringPartitions() []topicPartition {
	var out []topicPartition
	for id := range m.restores {
		for _, t := range m.stageTopics(id.stage) {
			out = append(out, topicPartition{t, id.partition})
		}
	}
	slices.SortFunc(out, compareTopicPartition)
	return slices.Compact(out)
}

// setPaused pauses fetching the assigned partitions no task may consume and
// resumes the ones that may be consumed again.
func (m *taskManager) setPaused(fc fetchControl, pause map[string][]int32) {
	resume := make(map[string][]int32)
	for t, ps := range m.paused {
		for _, p := range ps {
			if !slices.Contains(pause[t], p) {
				resume[t] = append(resume[t], p)
			}
		}
	}
	if len(resume) > 0 {
		fc.ResumeFetchPartitions(resume)
	}
	if len(pause) > 0 {
		fc.PauseFetchPartitions(pause)
	}
	m.paused = pause
}

// tendStandbys restarts the standbys that stopped on an error, when due.
func (m *taskManager) tendStandbys(ctx context.Context) { m.standby.tend(ctx, m.isOpen) }

// snapshots samples the tasks for a snapshot; notReady says why, per task,
// the instance is not ready.
func (m *taskManager) snapshots(now time.Time, prev *snapshot) (tasks []taskSnapshot, notReady []string) {
	tasks = make([]taskSnapshot, 0, len(m.tasks))
	for _, id := range m.sortedIDs() {
		t := m.tasks[id]
		ts := t.sample(now, prev)
		ts.restoring = m.restoring(id)
		switch {
		case ts.restoring:
			notReady = append(notReady, fmt.Sprintf("task %s/%d restoring", t.st.name, t.partition))
		case !t.timers.built:
			notReady = append(notReady, fmt.Sprintf("task %s/%d restored, starting", t.st.name, t.partition))
		}
		tasks = append(tasks, ts)
	}
	return tasks, notReady
}

// sourcesOf returns, per topic, the partitions the tasks in need of a
// build consume: where the step asks for start positions.
func (m *taskManager) sourcesOf(ts []*task) map[string][]int32 {
	need := make(map[string][]int32)
	for _, t := range ts {
		if t.node != nil {
			continue
		}
		for _, tp := range m.stageTopics(t.id.stage) {
			need[tp] = append(need[tp], t.partition)
		}
	}
	return need
}

// heldAsOpened reports whether every built task of the step is still held
// under the epochs it was opened with. A step checks it after its sends
// and changelog records are in the log and before it commits: a member
// that lost a task meanwhile must not commit its writes, which the group
// would not refuse when the step consumed nothing (txnEnder.end).
func (m *taskManager) heldAsOpened() bool {
	if m.sab.has(sabCommitUnheld) {
		return true
	}
	_, held := m.own.read()
	for _, t := range m.inStep() {
		if t.node == nil {
			continue
		}
		if h, ok := m.holding(t.id, held); !ok || !maps.Equal(h, t.held) {
			return false
		}
	}
	return true
}

// compareTaskIDs orders tasks by stage index, then partition.
func compareTaskIDs(x, y taskID) int {
	return cmp.Or(cmp.Compare(x.stage, y.stage), cmp.Compare(x.partition, y.partition))
}

func sortTaskIDs(ids []taskID) { slices.SortFunc(ids, compareTaskIDs) }

// topicPartition is one partition of one topic.
type topicPartition struct {
	topic     string
	partition int32
}

func compareTopicPartition(x, y topicPartition) int {
	return cmp.Or(cmp.Compare(x.topic, y.topic), cmp.Compare(x.partition, y.partition))
}
