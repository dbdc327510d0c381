package stage

// From the group's assignment to the tasks this instance may run: a task
// runs only with every one of its source partitions assigned here, and a
// partition is fetched only when every stage that reads it runs there.

import (
	"cmp"
	"maps"
	"slices"
)

// topicPartition is one partition of one topic.
type topicPartition struct {
	topic     string
	partition int32
}

// stageTopics returns the topics a stage's tasks consume: its sources and
// its tick topic.
func (a *App) stageTopics(si int) []string {
	var ts []string
	for _, b := range a.stages[si].sources {
		ts = append(ts, b.topic)
	}
	if tk := a.topo.tickTopic[si]; tk != "" {
		ts = append(ts, tk)
	}
	return ts
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
func (a *App) runnable(assigned map[string][]int32) (map[taskID]bool, map[string][]int32) {
	has := make(map[topicPartition]bool)
	for t, ps := range assigned {
		for _, p := range ps {
			has[topicPartition{t, p}] = true
		}
	}
	run := make(map[taskID]bool)
	for tp := range has {
		for _, si := range a.topo.bySource[tp.topic] {
			id := taskID{si, tp.partition}
			if _, seen := run[id]; seen {
				continue
			}
			run[id] = !slices.ContainsFunc(a.stageTopics(si), func(t string) bool { return !has[topicPartition{t, tp.partition}] })
		}
	}
	blocked := make(map[topicPartition]bool)
	for changed := true; changed; {
		changed = false
		for tp := range has {
			if blocked[tp] {
				continue
			}
			stages := a.topo.bySource[tp.topic]
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

func compareTopicPartition(x, y topicPartition) int {
	return cmp.Or(cmp.Compare(x.topic, y.topic), cmp.Compare(x.partition, y.partition))
}
