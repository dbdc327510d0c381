package stage

// Each stage's own positions. The stages of an application share one
// consumer group, so the group's committed offset on a topic partition is
// where the client resumes for every stage reading it. A stage that has
// not consumed that far — added over a topic another stage already reads,
// given a source another stage reads, or absent at that partition while an
// instance of another version advanced it — would start there and skip the
// records below. Its task's store knows how far it consumed (the causal
// node's resume positions, committed with every step); where that is lower
// than the client's position, the step aborts and the client rewinds. The
// stages that had consumed further drop what they refetch as replays.

import (
	"fmt"
	"maps"
	"slices"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kgo"
)

// rewindError aborts a step whose new task needs records below where the
// client consumes: the positions to set the client back to.
type rewindError struct {
	to map[topicPartition]int64
}

func (e *rewindError) Error() string {
	return fmt.Sprintf("stage: a task needs records below the group's position: rewinding %v", e.to)
}

// ownStarts compares where the task's stage has consumed each of its
// inputs to where the client starts (starts): a stage that never consumed
// an input — a new stage, a new source, a store and changelog both new —
// starts at its log start. It returns the positions the client must go
// back to, or nil.
func (t *task) ownStarts(n *protocol.Node, starts, logStarts map[string]map[int32]int64) *rewindError {
	resume := make(map[headers.Channel]int64)
	for _, p := range n.ResumePositions() {
		resume[p.Channel] = p.Offset
	}
	var rw *rewindError
	for i, ch := range t.inputs {
		topic := t.tickTopic
		if i < len(t.st.sources) {
			topic = t.st.sources[i].topic
		}
		start, ok := starts[topic][t.partition]
		if !ok {
			continue
		}
		floor := logStarts[topic][t.partition]
		need, known := resume[ch]
		switch {
		case !known && t.startOver:
			// State that started over with a recreated changelog
			// resumes with the group, as it did before it was lost:
			// its history is not replayed into fresh state.
			continue
		case !known:
			need = floor
		}
		if need = max(need, floor); need < start {
			if rw == nil {
				rw = &rewindError{to: make(map[topicPartition]int64)}
			}
			rw.to[topicPartition{topic, t.partition}] = need
		}
	}
	return rw
}

func (e *rewindError) merge(o *rewindError) *rewindError {
	if e == nil {
		return o
	}
	for tp, at := range o.to {
		if cur, ok := e.to[tp]; !ok || at < cur {
			e.to[tp] = at
		}
	}
	return e
}

// rewind runs after every step that did not commit, which rewound the
// client to the committed offsets: it adds rw's positions (nil: none) to
// the ones set back since the last commit, and sets the client to all of
// them. The next commit includes them (the client commits where it
// fetches from), and the next build starts new tasks there.
func (a *App) rewind(cl *kgo.Client, rw *rewindError) {
	if rw != nil {
		if a.client.rewound == nil {
			a.client.rewound = make(map[topicPartition]int64)
		}
		for tp, at := range rw.to {
			if r, ok := a.client.rewound[tp]; !ok || at < r {
				a.client.rewound[tp] = at
			}
		}
		a.log.Info("stage: a stage has not consumed as far as the group; fetching from its own position", "positions", rw.to)
	}
	if len(a.client.rewound) == 0 {
		return
	}
	set := make(map[string]map[int32]kgo.EpochOffset)
	for _, tp := range slices.SortedFunc(maps.Keys(a.client.rewound), compareTopicPartition) {
		if set[tp.topic] == nil {
			set[tp.topic] = make(map[int32]kgo.EpochOffset)
		}
		set[tp.topic][tp.partition] = kgo.EpochOffset{Epoch: -1, Offset: a.client.rewound[tp]}
	}
	cl.SetOffsets(set)
}
