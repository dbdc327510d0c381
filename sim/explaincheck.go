package sim

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
)

// checkExplain judges ExplainHolds after a committed step of a node that
// holds records. Asking the running node would load its heads and change
// which path its next calls take, so the check builds a second node from
// a copy of the committed store — exactly what the next incarnation would
// restore — and compares that node's ExplainHolds with what its
// InputStates and the broker's stamps say: one hold per non-empty queue,
// its head, depth and timestamp, and every claim the watermarks do not
// meet, with its diagnosis and watermarks, in clock order.
func (n *SimNode) checkExplain() {
	if _, real := n.proto.(*protocol.Node); !real || n.cfg == nil || n.invBroken {
		return
	}
	cfg := *n.cfg
	cfg.Store = n.store.Clone()
	// The simulated broker answers at once; nothing here blocks.
	fresh, err := protocol.New(context.Background(), cfg)
	if err != nil {
		n.w.Oracle.violate(HostError, n.spec.Name, "rebuilding from the committed store: "+err.Error())
		return
	}
	got, err := fresh.ExplainHolds()
	if err != nil {
		n.w.Oracle.violate(HostError, n.spec.Name, "ExplainHolds: "+err.Error())
		return
	}
	if want := n.expectHolds(fresh.InputStates()); !reflect.DeepEqual(got, want) {
		n.invBroken = true
		n.w.Oracle.violate(Invariant, n.spec.Name, fmt.Sprintf("ExplainHolds says %+v, the watermarks and stamps say %+v", got, want))
	}
}

// expectHolds derives ExplainHolds' answer from the input states and the
// stamps the broker holds.
func (n *SimNode) expectHolds(states []protocol.InputState) []protocol.Hold {
	b := n.w.Broker
	find := func(ch headers.Channel) *protocol.InputState {
		i := slices.IndexFunc(states, func(s protocol.InputState) bool { return s.Channel == ch })
		if i < 0 {
			return nil
		}
		return &states[i]
	}
	pos := func(s *protocol.InputState) int64 {
		p := max(s.Position, s.Fed+1, s.Frontier+1)
		if s.Held > 0 {
			p = max(p, s.Tail+1)
		}
		return p
	}
	// heldFrom: the queue on s holds a record of sender at or past seq.
	heldFrom := func(s *protocol.InputState, sender headers.SenderID, seq int64) bool {
		if s.Held == 0 {
			return false
		}
		var st headers.Stamp
		for off := s.Head; off <= s.Tail; off++ {
			if e := b.Entry(s.Channel, off); e != nil && e.Kind == Business &&
				headers.ReadStamp(&st, e.Headers) == nil && st.Tagged && st.Sender == sender && st.Seq >= seq {
				return true
			}
		}
		return false
	}
	var out []protocol.Hold
	for i := range states {
		s := &states[i]
		if s.Held == 0 {
			continue
		}
		e := b.Entry(s.Channel, s.Head)
		var st headers.Stamp
		if e == nil || headers.ReadStamp(&st, e.Headers) != nil {
			return nil // not a record the node could hold: the other checks report it
		}
		h := protocol.Hold{Coordinate: headers.Coordinate{Channel: s.Channel, Offset: s.Head}, Timestamp: e.Timestamp, Depth: s.Held}
		for c := range st.Clock.OffsetEntries() {
			src := find(c.Channel)
			if src == nil || src == s || src.Frontier >= c.Offset {
				continue
			}
			cl := protocol.Claim{Diagnosis: protocol.NotFetched, Channel: c.Channel, Offset: c.Offset, Seq: -1, DeliveredSeq: -1,
				Frontier: src.Frontier, Position: pos(src)}
			if c.Offset < cl.Position {
				cl.Diagnosis = protocol.HeldUpstream
			}
			h.Waiting = append(h.Waiting, cl)
		}
		for c := range st.Clock.SeqEntries() {
			src := find(c.Channel)
			if src == nil || src == s {
				continue
			}
			j := slices.IndexFunc(src.Delivered, func(m protocol.SenderMark) bool { return m.Sender == c.Sender })
			if j >= 0 && src.Delivered[j].Seq >= c.Seq {
				continue
			}
			cl := protocol.Claim{Channel: c.Channel, Offset: -1, Sequence: true, Sender: c.Sender, Seq: c.Seq, DeliveredSeq: -1,
				Frontier: src.Frontier, Position: pos(src)}
			switch {
			case heldFrom(src, c.Sender, c.Seq):
				cl.Diagnosis = protocol.HeldUpstream
			case j >= 0:
				cl.Diagnosis = protocol.SenderBehind
			default:
				cl.Diagnosis = protocol.SenderUnseen
			}
			if j >= 0 {
				cl.DeliveredSeq = src.Delivered[j].Seq
			}
			h.Waiting = append(h.Waiting, cl)
		}
		out = append(out, h)
	}
	return out
}
