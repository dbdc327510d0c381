package sim

import (
	"fmt"
	"maps"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
)

// Inspector is what a Protocol offers, optionally, for the invariant
// checks: the gate's per-channel watermarks (*protocol.Node implements
// it). A protocol without it is judged by the oracle alone.
type Inspector interface {
	InputStates() []protocol.InputState
}

// inspect returns p's input states, looking through the self-tests' seam
// wrapper, or false when p cannot be inspected.
func inspect(p Protocol) ([]protocol.InputState, bool) {
	if s, ok := p.(*sabotaged); ok {
		p = s.Protocol
	}
	in, ok := p.(Inspector)
	if !ok {
		return nil, false
	}
	return in.InputStates(), true
}

// watermarks is what the invariants remember of a node between calls: per
// consumed channel the frontier, and per channel and sender the delivered
// sequence mark. A node keeps the values it last saw and the values as of
// its last commit, since an aborted step rolls the node back to those.
type watermarks struct {
	frontier map[headers.Channel]int64
	marks    map[headers.Channel]map[headers.SenderID]int64
}

func newWatermarks() watermarks {
	return watermarks{frontier: map[headers.Channel]int64{}, marks: map[headers.Channel]map[headers.SenderID]int64{}}
}

func (w watermarks) clone() watermarks {
	c := watermarks{frontier: maps.Clone(w.frontier), marks: make(map[headers.Channel]map[headers.SenderID]int64, len(w.marks))}
	for ch, m := range w.marks {
		c.marks[ch] = maps.Clone(m)
	}
	return c
}

// forget drops ch's frontier: ch left the node's scope, and a regrowth
// seeds it afresh. Its delivered sequence marks stay: the node keeps them
// across the shrink, so the sequence claims they resolved stay resolved
// when ch returns, although those records are never fetched again.
func (w watermarks) forget(ch headers.Channel) {
	delete(w.frontier, ch)
}

// reach is one past the highest offset the host has fetched or reported
// as a position on ch, in any incarnation: the frontier can never pass it.
func (n *SimNode) reach(ch headers.Channel) (int64, bool) {
	r, ok := n.reached[ch]
	if p, has := n.spos[ch]; has && (!ok || p > r) {
		r, ok = p, true
	}
	return r, ok
}

// checkInvariants checks the gate's watermarks after the protocol call op
// (issue 13, item 3):
//
//   - per channel, the frontier never decreases, within an incarnation and
//     across a restart, while the channel stays in scope;
//   - for a non-empty queue, head-1 <= frontier < head: everything below
//     the head was delivered or skipped, and the head was not;
//   - the frontier and the highest fed offset stay below what the host has
//     fetched or reported as a position;
//   - per channel and sender, the delivered sequence mark never decreases;
//   - every held head waits on a claim the watermarks do not meet, judged
//     from the stamp the broker holds at the head's offset: each call
//     cascades to its fixpoint, so a deliverable head is never left held.
//
// A violation is recorded once per node incarnation, so a broken subject
// does not flood the result.
func (n *SimNode) checkInvariants(op string) {
	if n.proto == nil || n.invBroken {
		return
	}
	states, ok := inspect(n.proto)
	if !ok {
		return
	}
	n.noteDrainFolds(states)
	bad := func(format string, args ...any) {
		n.invBroken = true
		n.w.Oracle.violate(Invariant, n.spec.Name, "after "+op+": "+fmt.Sprintf(format, args...))
	}
	// The gauges the protocol exports (Counters.Held, HeldHeads) are
	// what its queues hold.
	held, heads := 0, 0
	for i := range states {
		held += states[i].Held
		if states[i].Held > 0 {
			heads++
		}
	}
	if c := n.proto.Counters(); c.Held != held || c.HeldHeads != heads {
		bad("Counters says %d held in %d queues, the input states %d in %d", c.Held, c.HeldHeads, held, heads)
		return
	}
	for i := range states {
		s := &states[i]
		if f, ok := n.inv.frontier[s.Channel]; ok && s.Frontier < f {
			bad("frontier on %v moved back from %d to %d", s.Channel, f, s.Frontier)
			return
		}
		n.inv.frontier[s.Channel] = s.Frontier
		// Head and Tail are -1 for an empty queue; held offsets rise, so a
		// queue of Held records spans at least Held offsets.
		if (s.Held == 0) != (s.Head == -1) || (s.Held == 0) != (s.Tail == -1) || s.Held > 0 && s.Tail < s.Head+int64(s.Held)-1 {
			bad("queue on %v holds %d records with head %d and tail %d", s.Channel, s.Held, s.Head, s.Tail)
			return
		}
		if s.Held > 0 && (s.Frontier < s.Head-1 || s.Frontier >= s.Head) {
			bad("frontier %d on %v outside [head-1, head) for head %d (%d held)", s.Frontier, s.Channel, s.Head, s.Held)
			return
		}
		if r, ok := n.reach(s.Channel); ok && (s.Frontier >= r || s.Fed >= r) {
			bad("frontier %d or fed offset %d on %v at or past %d, the highest position fetched or reported", s.Frontier, s.Fed, s.Channel, r)
			return
		}
		// New restores without cascading; Release is the call that does.
		if s.Held > 0 && op != "New" && settles(states, s, n.w.Broker.Entry(s.Channel, s.Head)) {
			bad("held head %v@%d waits on no unmet claim: the cascade stopped short of its fixpoint", s.Channel, s.Head)
			return
		}
		marks := n.inv.marks[s.Channel]
		kept := 0
		for _, m := range s.Delivered {
			if _, ok := marks[m.Sender]; ok {
				kept++
			}
		}
		if kept < len(marks) {
			bad("%d of %d delivered sequence marks on %v forgotten", len(marks)-kept, len(marks), s.Channel)
			return
		}
		if marks == nil {
			marks = map[headers.SenderID]int64{}
			n.inv.marks[s.Channel] = marks
		}
		for _, m := range s.Delivered {
			if prev, ok := marks[m.Sender]; ok && m.Seq < prev {
				bad("delivered sequence mark of %v on %v moved back from %d to %d", m.Sender, s.Channel, prev, m.Seq)
				return
			}
			marks[m.Sender] = m.Seq
		}
	}
}

// noteDelivered remembers the sender tag of a delivered record.
func (n *SimNode) noteDelivered(d *protocol.Delivery) {
	if !d.Stamp.Tagged {
		return
	}
	if n.seqSeen == nil {
		n.seqSeen = map[headers.Channel]map[headers.SenderID]int64{}
	}
	m := n.seqSeen[d.Channel]
	if m == nil {
		m = map[headers.SenderID]int64{}
		n.seqSeen[d.Channel] = m
	}
	if s, ok := m[d.Stamp.Sender]; !ok || d.Stamp.Seq > s {
		m[d.Stamp.Sender] = d.Stamp.Seq
	}
}

// noteSharedClaims counts the state the shared-senders family targets: a
// record fed with a sequence claim on another input that its own sender
// has not met yet, while another sender's delivered sequence there has.
// A gate that resolves the claim by the wrong sender's mark passes it.
func (n *SimNode) noteSharedClaims(rec *protocol.Record) {
	var st headers.Stamp
	if headers.ReadStamp(&st, rec.Headers) != nil || st.Clock.NumSeqs() == 0 {
		return
	}
	for e := range st.Clock.SeqEntries() {
		m := n.seqSeen[e.Channel]
		if e.Channel == rec.Channel || m == nil {
			continue
		}
		if s, ok := m[e.Sender]; ok && s >= e.Seq {
			continue
		}
		for other, s := range m {
			if other != e.Sender && s >= e.Seq {
				n.w.stats.SharedClaims++
				return
			}
		}
	}
}

// settles reports whether the watermarks in states meet every claim of the
// stamp of e, the record at the head of s's queue: offset claims by the
// frontier, sequence claims by the claimed sender's delivered mark, on
// every consumed channel other than the head's own.
func settles(states []protocol.InputState, s *protocol.InputState, e *Entry) bool {
	if e == nil || e.Kind != Business {
		return false
	}
	var st headers.Stamp
	if headers.ReadStamp(&st, e.Headers) != nil {
		return false
	}
	find := func(ch headers.Channel) *protocol.InputState {
		for i := range states {
			if states[i].Channel == ch {
				return &states[i]
			}
		}
		return nil
	}
	for c := range st.Clock.OffsetEntries() {
		if in := find(c.Channel); in != nil && in != s && in.Frontier < c.Offset {
			return false
		}
	}
	for c := range st.Clock.SeqEntries() {
		in := find(c.Channel)
		if in == nil || in == s {
			continue
		}
		met := false
		for _, m := range in.Delivered {
			if m.Sender == c.Sender && m.Seq >= c.Seq {
				met = true
			}
		}
		if !met {
			return false
		}
	}
	return true
}
