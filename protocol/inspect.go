package protocol

import (
	"slices"

	"github.com/parsley-go/parsley/headers"
)

// InputState is the gate's view of one consumed channel: the watermarks a
// verification harness checks its invariants against and an operator reads
// when a channel stalls. It carries no record bytes.
type InputState struct {
	Channel headers.Channel
	// Frontier is the offset at or below which everything on the channel
	// was delivered or skipped; -1 when nothing was.
	Frontier int64
	// Fed is the highest offset fed to OnRecord in this incarnation; -1
	// when none was.
	Fed int64
	// Position is the highest consumer position reported through
	// PositionAdvance in this incarnation; 0 when none was.
	Position int64
	// Head and Tail are the offsets of the first and last held records;
	// -1 when the queue is empty. Held is the queue's length.
	Head, Tail int64
	Held       int
	// Delivered holds the delivered-sequence mark of every sender that has
	// delivered a tagged record on the channel, sorted by sender.
	Delivered []SenderMark
}

// SenderMark is the highest send sequence delivered from one sender on one
// channel, and the offset it was delivered at.
type SenderMark struct {
	Sender headers.SenderID
	Seq    int64
	Offset int64
}

// InputStates returns the state of every consumed channel, in clock order.
// It reads memory only and changes nothing; it works on a failed node too.
func (n *Node) InputStates() []InputState {
	out := make([]InputState, 0, len(n.inputs))
	for _, in := range n.inputs {
		s := InputState{Channel: in.ch, Frontier: in.frontier, Fed: in.fed, Position: in.position, Head: -1, Tail: -1, Held: in.q.len()}
		if s.Held > 0 {
			s.Head, s.Tail = in.q.at(0).offset, in.q.at(s.Held-1).offset
		}
		for sender, m := range in.ds {
			s.Delivered = append(s.Delivered, SenderMark{Sender: sender, Seq: m.seq, Offset: m.offset})
		}
		slices.SortFunc(s.Delivered, func(a, b SenderMark) int { return a.Sender.Compare(b.Sender) })
		out = append(out, s)
	}
	return out
}
