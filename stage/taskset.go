package stage

// The set of tasks the session loop runs, and what the loop asks of it.
// Opening a task, restoring its store and reconciling the set with the
// assignment are the loop's (tasks.go, restore.go); a task's own work is
// task.go's.

import (
	"cmp"
	"slices"
	"time"
)

// taskSet is the tasks open on this instance and the restores among them.
// The session loop owns it and alone touches it, without a lock: other
// goroutines read the snapshot the loop publishes (snapshot.go), and a
// restore's goroutine owns only its task's store, until its job is done
// (restore.go).
type taskSet struct {
	byID     map[taskID]*task
	restores map[taskID]*restoreJob // restores in progress (restore.go)
	// repause: a restore ended, so reconcile recomputes what is fetched.
	repause bool
}

func newTaskSet() *taskSet {
	return &taskSet{byID: make(map[taskID]*task), restores: make(map[taskID]*restoreJob)}
}

// isOpen reports whether the task is open here.
func (s *taskSet) isOpen(id taskID) bool { return s.byID[id] != nil }

// restoring reports whether the task's store is being restored.
func (s *taskSet) restoring(id taskID) bool { return s.restores[id] != nil }

// sortedIDs returns the open tasks' IDs in task order.
func (s *taskSet) sortedIDs() []taskID {
	ids := make([]taskID, 0, len(s.byID))
	for id := range s.byID {
		ids = append(ids, id)
	}
	sortTaskIDs(ids)
	return ids
}

// inStep returns the tasks that take part in a step, in task order: every
// open task but those restoring.
func (s *taskSet) inStep() []*task {
	ids := slices.DeleteFunc(s.sortedIDs(), s.restoring)
	ts := make([]*task, len(ids))
	for i, id := range ids {
		ts[i] = s.byID[id]
	}
	return ts
}

// needsStep reports whether some restored task has no node: a step builds
// it.
func (s *taskSet) needsStep() bool {
	for id, t := range s.byID {
		if t.node == nil && !s.restoring(id) {
			return true
		}
	}
	return false
}

// timerDue reports whether some built task has a tick or a sweep due at
// now, so the loop runs a step although nothing was fetched.
func (s *taskSet) timerDue(now time.Time) bool {
	for _, t := range s.byID {
		if t.node != nil && (t.tickDue(now) || t.sweepDue(now)) {
			return true
		}
	}
	return false
}

// resetAll drops every task's node after a step that did not commit, or
// when the session ends: each is rebuilt from committed state.
func (s *taskSet) resetAll() {
	for _, t := range s.byID {
		t.reset()
	}
}

// close stops the task's restore, if one runs, and closes and forgets the
// task.
func (s *taskSet) close(id taskID) {
	t := s.byID[id]
	if t == nil {
		return
	}
	if j := s.restores[id]; j != nil {
		j.cancel()
		<-j.done
		delete(s.restores, id)
	}
	t.close()
	delete(s.byID, id)
}

// closeAll closes every task (Run returns).
func (s *taskSet) closeAll() {
	for id := range s.byID {
		s.close(id)
	}
}

func sortTaskIDs(ids []taskID) {
	slices.SortFunc(ids, func(x, y taskID) int {
		return cmp.Or(cmp.Compare(x.stage, y.stage), cmp.Compare(x.partition, y.partition))
	})
}
