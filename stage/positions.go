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
	"context"
	"fmt"
	"log/slog"
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

// positions is where the session's client starts and resumes consuming:
// the start positions of tasks that build, and the positions the loop set
// back since the last commit. Owned by the session loop; it starts over
// with each session.
type positions struct {
	group   string // Config.ApplicationID
	cluster cluster
	txn     *txnEnder // records the stable offset read (txnend.go)
	log     *slog.Logger
	rewound map[topicPartition]int64 // positions set back this session and not committed since
}

// sessionEnded forgets what the ended session set back.
func (ps *positions) sessionEnded() { clear(ps.rewound) }

// committed forgets what a committed step included.
func (ps *positions) committed() { clear(ps.rewound) }

// rewind runs after every step that did not commit, which rewound the
// client to the committed offsets: it adds rw's positions (nil: none) to
// the ones set back since the last commit, and sets the client to all of
// them. The next commit includes them (the client commits where it
// fetches from), and the next build starts new tasks there.
func (ps *positions) rewind(sess interface {
	SetOffsets(map[string]map[int32]kgo.EpochOffset)
}, rw *rewindError) {
	if rw != nil {
		if ps.rewound == nil {
			ps.rewound = make(map[topicPartition]int64)
		}
		for tp, at := range rw.to {
			if r, ok := ps.rewound[tp]; !ok || at < r {
				ps.rewound[tp] = at
			}
		}
		ps.log.Info("stage: a stage has not consumed as far as the group; fetching from its own position", "positions", rw.to)
	}
	if len(ps.rewound) == 0 {
		return
	}
	set := make(map[string]map[int32]kgo.EpochOffset)
	for _, tp := range slices.SortedFunc(maps.Keys(ps.rewound), compareTopicPartition) {
		if set[tp.topic] == nil {
			set[tp.topic] = make(map[int32]kgo.EpochOffset)
		}
		set[tp.topic][tp.partition] = kgo.EpochOffset{Epoch: -1, Offset: ps.rewound[tp]}
	}
	sess.SetOffsets(set)
}

// starts returns, per source partition of the tasks in need, where this
// incarnation starts consuming — the group's committed offset, or the log
// start when there is none or it is lower (host duties H5, H6), or lower
// where a stage that had not consumed that far made the client rewind
// (above) — and the log starts. A committed offset still pending in
// another instance's transaction may read lower than it will be; a lower
// start only claims less, so it is safe.
func (ps *positions) starts(ctx context.Context, need map[string][]int32) (starts, logStarts map[string]map[int32]int64, err error) {
	sources := slices.Sorted(maps.Keys(need))
	committed, err := ps.cluster.FetchOffsets(ctx, ps.group)
	if err != nil {
		return nil, nil, fmt.Errorf("stage: fetch committed offsets: %w", err)
	}
	listedStarts, err := ps.cluster.ListStartOffsets(ctx, sources...)
	if err != nil {
		return nil, nil, fmt.Errorf("stage: list log starts: %w", err)
	}
	logEnds, err := ps.cluster.ListEndOffsets(ctx, sources...)
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
				if dl := pastEnd(ps.group, t, p, pos, le.Offset); dl != nil {
					return nil, nil, &fatal{dl}
				}
			}
			if r, ok := ps.rewound[topicPartition{t, p}]; ok && r < pos {
				pos = max(r, ls.Offset)
			}
			starts[t][p], logStarts[t][p] = pos, ls.Offset
		}
	}
	ps.txn.readUncommitted(ctx, need) // txnend.go
	return starts, logStarts, nil
}
