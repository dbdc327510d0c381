package protocol

import "github.com/parsley-go/parsley/headers"

// Diagnosis says why a claim holds a head (reference 13).
type Diagnosis uint8

const (
	// NotFetched: the claimed offset is above everything fetched on its
	// channel here; the cause is still in flight.
	NotFetched Diagnosis = iota + 1
	// HeldUpstream: the claimed record was fetched here but sits in its own
	// channel's hold queue; follow that channel's head.
	HeldUpstream
	// SenderUnseen: a sequence claim names a sender never delivered on that
	// channel here.
	SenderUnseen
	// SenderBehind: a sequence claim is ahead of what has been delivered
	// from that sender on that channel.
	SenderBehind
)

// String returns the stable vc-hold-* code.
func (d Diagnosis) String() string {
	switch d {
	case NotFetched:
		return "vc-hold-not-fetched"
	case HeldUpstream:
		return "vc-hold-held-upstream"
	case SenderUnseen:
		return "vc-hold-sender-unseen"
	case SenderBehind:
		return "vc-hold-sender-behind"
	}
	return "vc-hold-unknown"
}

// Hold describes one gating head: a record at the head of its channel's
// queue, and what it waits for. It carries no payload bytes.
type Hold struct {
	Coordinate headers.Coordinate
	Timestamp  int64 // the held record's timestamp (the host knows when it became head)
	Depth      int   // records in the queue, the head included
	Waiting    []Claim
}

// Claim is one unmet claim of a held head, with the local watermarks that
// show the gap.
type Claim struct {
	Diagnosis Diagnosis
	Channel   headers.Channel
	// Offset claims: the claimed offset. Sequence claims: -1.
	Offset int64
	// Sequence claims: the claimed sender and sequence, and the highest
	// sequence delivered from that sender on the channel (-1 if none).
	Sequence     bool
	Sender       headers.SenderID
	Seq          int64
	DeliveredSeq int64
	// The local frontier and position on the claimed channel: the position
	// is one past the highest offset fetched or reported by the consumer.
	Frontier int64
	Position int64
}

// ExplainHolds returns every gating head with its unmet claims, sorted by
// channel. Loading a head that is not yet in memory reads the store; an
// error there fails the node like any store error.
func (n *Node) ExplainHolds() ([]Hold, error) {
	if err := n.check("ExplainHolds"); err != nil {
		return nil, err
	}
	var out []Hold
	for _, in := range n.inputs {
		q := &in.q
		if q.len() == 0 {
			continue
		}
		if err := n.loadHead(in); err != nil {
			return nil, err
		}
		h := Hold{Coordinate: q.head.Coordinate, Timestamp: q.head.Timestamp, Depth: q.len()}
		c := &q.headStmp.Clock
		for e := range c.OffsetEntries() {
			src, ok := n.byChan[e.Channel]
			if !ok || src == in || src.frontier >= e.Offset {
				continue
			}
			cl := Claim{Channel: e.Channel, Offset: e.Offset, Seq: -1, DeliveredSeq: -1, Frontier: src.frontier, Position: src.pos()}
			if e.Offset < src.pos() {
				cl.Diagnosis = HeldUpstream
			} else {
				cl.Diagnosis = NotFetched
			}
			h.Waiting = append(h.Waiting, cl)
		}
		for e := range c.SeqEntries() {
			src, ok := n.byChan[e.Channel]
			if !ok || src == in {
				continue
			}
			m, seen := src.ds[e.Sender]
			if seen && m.seq >= e.Seq {
				continue
			}
			cl := Claim{Channel: e.Channel, Offset: -1, Sequence: true, Sender: e.Sender, Seq: e.Seq, DeliveredSeq: -1, Frontier: src.frontier, Position: src.pos()}
			switch {
			case n.heldFrom(src, e.Sender, e.Seq):
				cl.Diagnosis = HeldUpstream
			case seen:
				cl.Diagnosis = SenderBehind
			default:
				cl.Diagnosis = SenderUnseen
			}
			if seen {
				cl.DeliveredSeq = m.seq
			}
			h.Waiting = append(h.Waiting, cl)
		}
		out = append(out, h)
	}
	return out, nil
}

// pos is one past the highest offset known fetched or skipped on the channel.
func (in *input) pos() int64 {
	p := max(in.position, in.fed+1, in.frontier+1)
	if l := in.q.len(); l > 0 {
		p = max(p, in.q.at(l-1).offset+1)
	}
	return p
}

// heldFrom reports whether in's queue holds a record from sender at or
// past seq: the claimed send was fetched and is held.
func (n *Node) heldFrom(in *input, sender headers.SenderID, seq int64) bool {
	idx, ok := n.senders.idx[sender]
	if !ok {
		return false
	}
	for i := range in.q.len() {
		if k := in.q.at(i); k.sender == idx && k.seq >= seq {
			return true
		}
	}
	return false
}

// Counters are the node's counts since New, and its current gauges.
type Counters struct {
	Delivered       uint64 // records released through the gate
	ReplaysSkipped  uint64 // records fed at or below the frontier and dropped
	CarriedSkipped  uint64 // records skipped at the head because carried ancestry holds them by their sender's sequence
	Stamps          uint64 // stamps issued by PrepareSend
	PositionFolds   uint64 // frontier raises from a reported consumer position
	SkippedRunFolds uint64 // frontier raises over a skipped run behind a held head
	Held            int    // records in hold queues now
	HeldHeads       int    // queues with a held head now
	// The stamp-side clock (carried ancestry ∪ own outputs ∪ advertised
	// clocks): its offset and sequence entries now.
	StampOffsetEntries int
	StampSeqEntries    int
}

// Counters returns the counters and gauges.
func (n *Node) Counters() Counters {
	c := n.counters
	c.Held = n.held
	c.HeldHeads = n.nonEmpty
	c.StampOffsetEntries = n.agg.NumOffsets()
	c.StampSeqEntries = n.agg.NumSeqs()
	return c
}
