package sim

import (
	"fmt"

	"github.com/parsley-go/parsley/headers"
)

// Tag records the sender tag a record was stamped with, so the stamp
// check can accept a sequence claim as covering it. Untagged records (a
// plain client's) are covered only by offset claims.
func (o *Oracle) Tag(id int, sender headers.SenderID, seq int64) {
	r := &o.recs[id]
	r.tagged, r.sender, r.seq = true, sender, seq
}

// Ancestor is one record in an actor's real causal past, as the stamp
// check sees it: its coordinate and, when it was sent by a stage, the
// sender tag it carried.
type Ancestor struct {
	headers.Coordinate
	Tagged bool
	Sender headers.SenderID
	Seq    int64
}

// Uncovered walks actor a's causal past — everything it delivered or
// observed, their ancestry, and its own sends, staged ones included — and
// returns how many ancestors owed returns true for and covered returns
// false for, and the first of them. The oracle decides what the past is;
// the caller decides, from a stamp, what covers it.
func (o *Oracle) Uncovered(a int, owed, covered func(*Ancestor) bool) (n int, first Ancestor) {
	o.actors[a].cur.past.each(func(x int) bool {
		r := &o.recs[x]
		anc := Ancestor{Coordinate: r.coord, Tagged: r.tagged, Sender: r.sender, Seq: r.seq}
		if owed(&anc) && !covered(&anc) {
			if n == 0 {
				first = anc
			}
			n++
		}
		return true
	})
	return n, first
}

// checkStamp judges the stamp st of a send to dest at the moment it is
// made (issue 13, item 1; host duty H4 is checked beside it in send). Every
// real ancestor of the send that is not on dest, whose topic still exists
// and whose offset is at or above its log start, must be covered: by an
// offset claim at or above its offset on its channel, or by a sequence
// claim of its sender on its channel at or above its sequence. An ancestor
// outside those bounds is one no gate can ever wait for, so a stamp may
// drop it (truncation does).
//
// Checks on a stamp's claims against ground truth belong here, one call
// per send, with the stamp and the oracle's view.
func (n *SimNode) checkStamp(dest headers.Channel, st *headers.Stamp) {
	b := n.w.Broker
	owed := func(a *Ancestor) bool {
		ch := a.Channel
		t := b.TopicByID(ch.Topic)
		return ch != dest && t != nil && !t.deleted && a.Offset >= b.LogStart(ch)
	}
	covered := func(a *Ancestor) bool {
		if o, ok := st.Clock.Offset(a.Channel); ok && o >= a.Offset {
			return true
		}
		if a.Tagged {
			if s, ok := st.Clock.Seq(a.Channel, a.Sender); ok && s >= a.Seq {
				return true
			}
		}
		return false
	}
	if k, first := n.w.Oracle.Uncovered(n.actor, owed, covered); k > 0 {
		detail := fmt.Sprintf("stamp for %v leaves %d real ancestors unclaimed, first %v", dest, k, first.Coordinate)
		if first.Tagged {
			detail += fmt.Sprintf(" (sender %v seq %d)", first.Sender, first.Seq)
		}
		n.w.Oracle.violate(StampGap, n.spec.Name, detail)
	}
}
