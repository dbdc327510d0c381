package sim

import (
	"fmt"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
)

// Carried returns the highest offset on ch in actor a's causal past: what
// it delivered there, or carries as the ancestry of what it delivered,
// observed or sent. A claim covers every cause at or below it, so this is
// how far the actor may account for ch without fetching it again.
func (o *Oracle) Carried(a int, ch headers.Channel) (int64, bool) {
	hi, ok := int64(-1), false
	o.actors[a].cur.past.each(func(x int) bool {
		if c := o.recs[x].coord; c.Channel == ch && c.Offset > hi {
			hi, ok = c.Offset, true
		}
		return true
	})
	return hi, ok
}

// accountedEnd is the oracle's own resume bound for ch at a (re)start of n
// (issue 13, item 2): one past everything the node delivered or carries on
// ch, or from, whichever is higher, then past any offsets that never
// arrive as records (markers, aborted records, history below the log
// start). Every record below it is accounted for; the first at or above
// it is one the node still owes a delivery. It reads no protocol state.
func (n *SimNode) accountedEnd(ch headers.Channel, from int64) int64 {
	e := from
	if m, ok := n.w.Oracle.Carried(n.actor, ch); ok && m+1 > e {
		e = m + 1
	}
	b := n.w.Broker
	for end := b.End(ch); e < end; e++ {
		if x := b.Entry(ch, e); x != nil && (x.Kind == Business || x.Kind == Pending) {
			break
		}
	}
	return e
}

// checkResume judges the protocol's ResumePositions for ch against the
// oracle's bound and returns the baseline the oracle judges ch from: the
// host's starting position, or the bound when the resume position skipped
// past it (so completeness flags the skipped records too).
func (n *SimNode) checkResume(ch headers.Channel, from, start int64, resume []protocol.Position) int64 {
	bound := n.accountedEnd(ch, from)
	for _, r := range resume {
		if r.Channel == ch && r.Offset > bound {
			n.w.Oracle.violate(LostOnResume, n.spec.Name, fmt.Sprintf("ResumePositions starts %v at %d, skipping offset %d, which the node neither delivered nor carries (host position %d)", ch, r.Offset, bound, from))
		}
	}
	return min(start, bound)
}

// ForgetPast empties actor a's causal past: its state was lost, so what it
// delivered before no longer shapes what it sends. What it delivered stays
// recorded, so a second delivery is still a duplicate.
func (o *Oracle) ForgetPast(a int) {
	ac := o.actors[a]
	ac.cur.past, ac.committed.past = nil, nil
	ac.carried, ac.reentry, ac.skip = nil, nil, nil
}
