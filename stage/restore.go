package stage

// Restores off the step path: a task that restores its store from its
// changelog (after a move, or with its store wiped) does so on a goroutine
// of its own while the instance's other tasks go on processing.

import (
	"context"
	"errors"
	"fmt"

	"github.com/parsley-go/parsley/internal/state"
)

// restoreJob is one task's restore. Until done is closed its goroutine
// owns the task's store; the session loop owns the job, and stops it with
// cancel and a wait on done (closeTask).
type restoreJob struct {
	cancel context.CancelFunc
	done   chan struct{}
	res    state.Restored
	err    error
}

// startRestore restores t's store on a goroutine. The task takes part in
// no step until the restore finishes (finishRestores).
func (a *App) startRestore(t *task) {
	ctx, cancel := context.WithCancel(context.Background())
	j := &restoreJob{cancel: cancel, done: make(chan struct{})}
	a.tasks.restores[t.id] = j
	newClient := a.newClient
	go func() {
		defer close(j.done)
		if a.hooks.restore != nil {
			a.hooks.restore(ctx, t.st.name, t.partition)
		}
		j.res, j.err = state.Restore(ctx, a.topo.admin, newClient, t.changelog, t.partition, t.kv, a.cfg.WallClock)
		if a.hooks.restored != nil {
			a.hooks.restored(t.st.name, t.partition, j.res, j.err, t.kv)
		}
	}()
}

// finishRestores takes in the restores that ended: a restored task joins
// the next step (reconcile resumes its partitions); a failed one is closed,
// and the error stops Run (a lost changelog, a broker without topic IDs) or
// rebuilds the client, which opens and restores it again.
func (a *App) finishRestores() error {
	var errs []error
	for _, id := range a.tasks.sortedIDs() {
		j := a.tasks.restores[id]
		if j == nil {
			continue
		}
		select {
		case <-j.done:
		default:
			continue
		}
		delete(a.tasks.restores, id)
		a.tasks.repause = true
		t := a.tasks.byID[id]
		res, err := j.res, j.err
		switch {
		case res.Reincarnated:
			t.startOver = true
			// The changelog was recreated or this is another cluster:
			// the store's offsets point into a log that no longer
			// exists. Someone should know their state started over.
			a.log.Warn("stage: task store wiped: it mirrors another changelog than this one (topic recreated, or another cluster); restoring from the changelog start",
				"stage", t.st.name, "partition", t.partition, "store", t.kv.Path(), "reason", res.Reason,
				"was", res.Previous.String(), "now", res.Changelog.String(), "checkpoint", res.From)
		case res.Wiped:
			// A store slept past the changelog's tombstone retention, or
			// its checkpoint cannot be trusted: replaying from it could
			// resurrect deleted keys.
			a.log.Info("stage: task store wiped; restoring from the changelog start",
				"stage", t.st.name, "partition", t.partition, "store", t.kv.Path(), "reason", res.Reason,
				"age", res.Age, "delete_retention", res.Window, "checkpoint", res.From)
		}
		if err == nil {
			continue
		}
		a.tasks.close(id)
		// Neither a lost changelog nor a broker without topic IDs gets
		// better by retrying.
		if errors.Is(err, state.ErrChangelogBehind) || errors.Is(err, state.ErrNoTopicID) {
			return &fatal{fmt.Errorf("stage %q partition %d: %w", t.st.name, t.partition, err)}
		}
		errs = append(errs, fmt.Errorf("stage %q partition %d: restore: %w", t.st.name, t.partition, err))
	}
	return errors.Join(errs...)
}

// restoringPartitions returns the partitions the restoring tasks consume:
// nothing is fetched from them until the restore ends.
func (a *App) restoringPartitions() map[topicPartition]bool {
	out := make(map[topicPartition]bool)
	for id := range a.tasks.restores {
		for _, t := range a.stageTopics(id.stage) {
			out[topicPartition{t, id.partition}] = true
		}
	}
	return out
}
