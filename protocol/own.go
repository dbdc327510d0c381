package protocol

import (
	"context"
	"slices"

	"github.com/parsley-go/parsley/headers"
)

// Own outputs. A node's earlier sends are causes of its later ones. Within
// an incarnation its sequence claims say so; across incarnations its stamps
// claim the offsets of the sends its earlier incarnations committed, which
// the host reports with Sent before the step that made them commits. A
// sink's end offset would cover them too, but under exactly-once it is a
// transaction marker, and a writer names only committed records (wire
// constraint 8).

// Sent reports that the broker acknowledged a send this node stamped for
// at.Channel (a sink channel PrepareSend issued a sequence on in this
// incarnation) and stored it at at.Offset. The host calls it for every
// send of a step once acknowledged and before Flush, so the offset commits
// with the send; later incarnations claim it as an own output. It changes
// nothing this incarnation stamps: its sequence claims already cover the
// send.
//
// Refused without any change: a channel of an undeclared sink
// (ErrUndeclaredSink), a negative offset, or a channel no send was
// prepared for in this incarnation (ErrInvalidRecord).
func (n *Node) Sent(at headers.Coordinate) error {
	const op = "Sent"
	if err := n.check(op); err != nil {
		return err
	}
	if !n.sinkSet[at.Topic] || at.Partition < 0 {
		return coordErr(op, at.Channel, at.Offset, ErrUndeclaredSink)
	}
	if at.Offset < 0 {
		return coordErr(op, at.Channel, at.Offset, ErrInvalidRecord)
	}
	if _, found := searchChannel(n.sent, at.Channel); !found {
		return coordErr(op, at.Channel, at.Offset, because(ErrInvalidRecord, "no send prepared to this channel in this incarnation"))
	}
	if cur, ok := n.acked[at.Channel]; ok && cur >= at.Offset {
		return nil
	}
	if !slices.Contains(n.ackedDirty, at.Channel) {
		n.ackedDirty = append(n.ackedDirty, at.Channel)
	}
	n.acked[at.Channel] = at.Offset
	return nil
}

// restoreOwn reads the acknowledged sends, builds the own outputs of the
// current sinks and the sequence seeds, and the former sinks' own outputs,
// which fold into carried ancestry. p.sq must be restored first.
//
// A sink channel with a stored sequence but no acknowledged offset was
// sent to by a build (or host) that did not report acknowledgements; it
// falls back to the end-offset over-claim, which only delays. A channel
// with no stored sequence seeds its first sequence at its end offset.
func (p *initPlan) restoreOwn(ctx context.Context, n *Node) error {
	const op = "init"
	err := scanChannelInts(n.store, op, pfxAcked, func(ch headers.Channel, v int64) { p.acked[ch] = v })
	if err != nil {
		return err
	}
	// claim folds one topic's own sends into dst.
	claim := func(dst *headers.Clock, t headers.TopicID, ends []int64) {
		for ch, o := range p.acked {
			if ch.Topic == t {
				dst.SetOffset(ch, o) // a max: map order cannot escape
			}
		}
		for part, e := range ends {
			ch := headers.Channel{Topic: t, Partition: int32(part)}
			if _, acked := p.acked[ch]; acked {
				continue
			}
			if _, sent := p.sq[ch]; sent && e > 0 {
				dst.SetOffset(ch, e-1)
			}
		}
	}
	for _, t := range p.prev.sinks {
		if n.sinkSet[t] {
			continue
		}
		// A former sink's own outputs must survive in the stamp; a topic
		// that no longer exists is unclaimable and skipped.
		ends, exists, err := n.offsets.EndOffsets(ctx, t)
		if err != nil {
			return &Error{Op: op + ": former sink end offsets", Topic: t, Err: err}
		}
		if exists {
			claim(&p.formerOwn, t, ends)
		}
	}
	for _, t := range n.sinks {
		ends, exists, err := n.offsets.EndOffsets(ctx, t)
		if err != nil {
			return &Error{Op: op + ": sink end offsets", Topic: t, Err: err}
		}
		if !exists {
			return &Error{Op: op, Topic: t, Err: ErrSinkMissing}
		}
		claim(&p.own, t, ends)
		for part, e := range ends {
			ch := headers.Channel{Topic: t, Partition: int32(part)}
			if _, ok := p.sq[ch]; !ok && e > 0 {
				p.sqSeed[ch] = e
			}
		}
	}
	return nil
}
