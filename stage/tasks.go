package stage

// Reconciling tasks with the assignment: opening, restoring and closing
// task stores, and where a new incarnation starts consuming.

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/state"
	"github.com/twmb/franz-go/pkg/kgo"
)

// reconcile brings the task set in line with the assignment: it closes
// the tasks no longer runnable here and those that lost a partition since
// the last reconcile (another instance may have processed it meanwhile),
// opens and restores the new ones, and pauses the assigned partitions no
// task may consume. Tasks that keep all their partitions keep their node
// and go on processing (cooperative rebalancing).
func (a *App) reconcile(ctx context.Context, cl *kgo.Client) error {
	gen, assigned, dropped := a.asg.read()
	if gen == a.client.seenGen && !a.tasks.repause {
		return nil
	}
	a.tasks.repause = false
	want, pause := a.runnable(assigned)
	// Held back by the assignment itself, before the restores add theirs:
	// only these are a reason to rejoin (below).
	heldBack := len(pause) > 0
	for id := range a.tasks.byID {
		if !want[id] || slices.ContainsFunc(a.stageTopics(id.stage), func(tp string) bool { return dropped[topicPartition{tp, id.partition}] }) {
			a.tasks.close(id)
		}
	}
	// Standbys of tasks that become active here stop first: their store
	// file is the task's (standby.go).
	a.standby.sync(ctx, want, a.tasks.isOpen)
	var ids []taskID
	for id := range want {
		if !a.tasks.isOpen(id) {
			ids = append(ids, id)
		}
	}
	sortTaskIDs(ids)
	for _, id := range ids {
		t := a.tasks.byID[id]
		if t == nil {
			var err error
			if t, err = a.openTask(ctx, id); err != nil {
				return err
			}
			a.tasks.byID[id] = t
			if a.hooks.opened != nil {
				a.hooks.opened(t.st.name, t.partition)
			}
		}
		a.startRestore(t) // restore.go
	}
	if heldBack {
		a.log.Info("stage: partitions held back: a task reading them lacks some of its source partitions here", "partitions", pause)
	}
	// Nothing is fetched for a task that restores, nor for the other
	// stages reading its partitions (they share the group's offsets). Every
	// start restores every task, so this is no news: not logged above.
	for tp := range a.restoringPartitions() {
		if slices.Contains(assigned[tp.topic], tp.partition) && !slices.Contains(pause[tp.topic], tp.partition) {
			pause[tp.topic] = append(pause[tp.topic], tp.partition)
		}
	}
	a.setPaused(cl, pause)
	if heldBack && !a.client.rejoined {
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
		a.client.rejoined = true
		a.log.Info("stage: assignment holds partitions back; asking the group to rebalance once", "partitions", pause)
		cl.ForceRebalance()
	}
	a.client.seenGen = gen
	a.asg.forget(dropped)
	a.status.ready.Store(true)
	a.observe() // readers see the new task set before its first step ends
	return nil
}

func (a *App) openTask(ctx context.Context, id taskID) (*task, error) {
	st := a.stages[id.stage]
	path := storePath(a.cfg.StateDir, a.cfg.ApplicationID, st.name, id.partition)
	if err := a.moveLegacyStore(ctx, st, id.partition, path); err != nil {
		return nil, err
	}
	kv, err := state.Open(ctx, path, state.CacheBytes(a.cfg.StateCache))
	if err != nil {
		return nil, &fatal{fmt.Errorf("stage %q partition %d: %w", st.name, id.partition, err)}
	}
	t := &task{
		env: a.env, st: st, id: id, partition: id.partition, kv: kv,
		changelog: ChangelogTopic(a.cfg.ApplicationID, st.name),
		byID:      make(map[headers.TopicID]*binding),
		clNext:    -1,
	}
	for i := range st.sources {
		b := &st.sources[i]
		m := a.topo.topics[b.topic]
		ch := headers.Channel{Topic: m.id, Partition: id.partition}
		t.inputs = append(t.inputs, ch)
		t.byID[m.id] = b
	}
	for _, k := range st.sinks {
		t.sinks = append(t.sinks, a.topo.topics[k.topicName()].id)
	}
	if tr := a.env.tracing; tr != nil {
		t.tr = tr.forTask(st.name, id.partition, a.topo.idName)
	}
	a.openTicks(t)
	return t, nil
}

func (a *App) closeTasks() {
	a.tasks.closeAll()
	a.standby.stopAll()
}

// startPositions returns, per source partition of the tasks in need,
// where this incarnation starts consuming — the group's committed offset,
// or the log start when there is none or it is lower (host duties H5, H6),
// or lower where a stage that had not consumed that far made the client
// rewind (positions.go) — and the log starts. A committed offset still
// pending in another instance's transaction may read lower than it will
// be; a lower start only claims less, so it is safe.
func (a *App) startPositions(ctx context.Context, need map[string][]int32) (starts, logStarts map[string]map[int32]int64, err error) {
	sources := slices.Sorted(maps.Keys(need))
	committed, err := a.topo.admin.FetchOffsets(ctx, a.cfg.ApplicationID)
	if err != nil {
		return nil, nil, fmt.Errorf("stage: fetch committed offsets: %w", err)
	}
	listedStarts, err := a.topo.admin.ListStartOffsets(ctx, sources...)
	if err != nil {
		return nil, nil, fmt.Errorf("stage: list log starts: %w", err)
	}
	logEnds, err := a.topo.admin.ListEndOffsets(ctx, sources...)
	if err != nil {
		return nil, nil, fmt.Errorf("stage: list log ends: %w", err)
	}
	starts, logStarts = make(map[string]map[int32]int64), make(map[string]map[int32]int64)
	for _, t := range sources {
		starts[t], logStarts[t] = make(map[int32]int64), make(map[int32]int64)
		for _, p := range need[t] {
			ls, ok := listedStarts.Lookup(t, p)
			if !ok || ls.Err != nil {
				return nil, nil, fmt.Errorf("stage: log start of %s[%d]: %v", t, p, ls.Err)
			}
			pos := ls.Offset
			c, ok := committed.Lookup(t, p)
			if ok && c.Err != nil {
				return nil, nil, fmt.Errorf("stage: committed offset of %s[%d]: %w", t, p, c.Err)
			}
			if ok && c.At > pos {
				pos = c.At
			}
			// Started past the end, the client would rewind to its reset
			// offset and feed records below the position given here.
			if le, ok := logEnds.Lookup(t, p); ok && le.Err == nil {
				if dl := a.pastEnd(t, p, pos, le.Offset); dl != nil {
					return nil, nil, &fatal{dl}
				}
			}
			if r, ok := a.client.rewound[topicPartition{t, p}]; ok && r < pos {
				pos = max(r, ls.Offset)
			}
			starts[t][p], logStarts[t][p] = pos, ls.Offset
		}
	}
	a.txn.readUncommitted(ctx, need) // txnend.go
	return starts, logStarts, nil
}

// setPaused pauses fetching the assigned partitions no task may consume and
// resumes the ones that may be consumed again.
func (a *App) setPaused(cl *kgo.Client, pause map[string][]int32) {
	resume := make(map[string][]int32)
	for t, ps := range a.client.paused {
		for _, p := range ps {
			if !slices.Contains(pause[t], p) {
				resume[t] = append(resume[t], p)
			}
		}
	}
	if len(resume) > 0 {
		cl.ResumeFetchPartitions(resume)
	}
	if len(pause) > 0 {
		cl.PauseFetchPartitions(pause)
	}
	a.client.paused = pause
}
