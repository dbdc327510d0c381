package sim

import (
	"bytes"
	"math/rand/v2"
	"slices"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
)

// gapFamilies are the scenario families issue 34 added: schedule shapes no
// earlier family produced, each the only place a class of protocol or
// headers bug shows (docs/verification.md, "Gap families").
func gapFamilies() []Scenario {
	return []Scenario{
		{Name: "regrow-claim", Build: func(r *rand.Rand) Spec {
			// S writes x then z for every record it delivers, so each z
			// record claims S's x send by sequence; R1 relays z into y1
			// as it goes, R2 relays all of z into y2 once N has taken x
			// back. N consumes a, x, y1 and y2, drops x at its first
			// restart and takes it back at its second. In between it
			// delivers S's claims on x through y1, and after the
			// regrowth its stamps must keep those it has not resolved
			// (T, consuming x and N's output, waits on them); the claims
			// on x that arrive through y2 and that N resolved before the
			// shrink stay resolved only by the delivered marks it kept.
			regrown := func(w *World) bool { return w.Nodes[3].restarts >= 2 && w.stats.Redeploys >= 2 }
			return Spec{Topics: topics(1, "a", "s", "x", "z", "y1", "y2", "out"),
				Producers: []ProducerSpec{producer("pa", 10, r.IntN(2) == 0, "a"), producer("ps", 20, r.IntN(2) == 0, "s")},
				Nodes: []NodeSpec{
					{Name: "S", Inputs: in("s"), Sinks: []string{"x", "z"}, Logic: Forward("x", "z")},
					{Name: "R1", Inputs: in("z"), Sinks: []string{"y1"}, Logic: Forward("y1")},
					{Name: "R2", Inputs: in("z"), Sinks: []string{"y2"}, Logic: Forward("y2"), Join: JoinWhen, JoinWhen: regrown},
					{Name: "N", Inputs: in("a", "x", "y1", "y2"), Sinks: []string{"out"}, Logic: Forward("out"), CrashWeight: 6,
						Redeploys: []Redeploy{{At: 1, Inputs: in("a", "y1", "y2"), Sinks: []string{"out"}, When: delivered("x"), Force: true},
							{At: 2, Inputs: in("a", "x", "y1", "y2"), Sinks: []string{"out"}, When: carriesUndelivered("x"), Force: true}}},
					{Name: "T", Inputs: in("x", "out")},
				}, Crashes: 10}
		}},
		{Name: "wide-claims", Build: func(r *rand.Rand) Spec {
			// W consumes g and the 32 partitions of w and forwards w's
			// records into f, so f records soon claim 20 channels and
			// more: more than 8 times D's two inputs, so D's gate reads
			// the claims through the lookup's binary search, not its
			// walk. D joins once all is written, and its f records wait
			// on g.
			ins := []Ref{{Topic: "g"}}
			var ws []Ref
			for p := range 32 {
				ins = append(ins, parts("w", p))
				ws = append(ws, parts("w", p))
			}
			fromW := func(_ *rand.Rand, d *protocol.Delivery) []Emission {
				if !bytes.HasPrefix(d.Key, []byte("pw-")) {
					return nil
				}
				return []Emission{{Topic: "f", Partition: 0, Key: d.Key, Value: d.Value}}
			}
			return Spec{Topics: []TopicSpec{{"g", 1}, {"w", 32}, {"f", 1}},
				Producers: []ProducerSpec{{Name: "pw", Targets: ws, Ops: 40}, producer("pg", 40, r.IntN(2) == 0, "g")},
				Nodes: []NodeSpec{
					{Name: "W", Inputs: ins, Sinks: []string{"f"}, Logic: fromW},
					{Name: "D", Inputs: in("f", "g"), Join: JoinWhenQuiet},
				}, Crashes: 3}
		}},
		{Name: "drain-fold", Build: func(r *rand.Rand) Spec {
			// F, a legacy host, writes b until it restarts, then c: its
			// restart seed claims b's trailing commit marker in every c
			// record. G, joining once all is written, consumes a, b and
			// c: F's b records wait there on a, so b's position past the
			// trailing marker is reported while b's queue is held, and
			// only the fold when that queue drains releases the c records.
			return Spec{Topics: topics(1, "a", "b", "c"),
				Producers: []ProducerSpec{producer("p", 12, true, "a")},
				Nodes: []NodeSpec{
					{Name: "F", Inputs: in("a"), Sinks: []string{"b", "c"}, Logic: Forward("b"), LogicAfterRestart: Forward("c"), LegacyHost: true},
					{Name: "G", Inputs: in("a", "b", "c"), Join: JoinWhenQuiet},
				}, Crashes: 2}
		}},
		{Name: "grow-carried", Build: func(r *rand.Rand) Spec {
			// px writes x and d, so its d records claim its x sends by
			// offset; its second send, to x, carries a stamp that does not
			// decode. N consumes a and d, then, once it carries that
			// record, drops d and takes x in the same rescope: x is seeded
			// at what d's advertised clock claimed, folded into carried
			// ancestry first. N's host refetches every input from below
			// its committed position, x from its log start, so the x
			// records N carries come back and must be dropped as replays
			// before their stamps are read. T judges N's output.
			return Spec{Topics: topics(1, "a", "x", "d", "out"),
				Producers: []ProducerSpec{producer("pa", 8, false, "a"), {Name: "px", Targets: in("x", "d"), Ops: 14, CorruptAt: 2}},
				Nodes: []NodeSpec{
					{Name: "N", Inputs: in("a", "d"), Sinks: []string{"out"}, Logic: Forward("out"), Replays: true,
						Redeploys: []Redeploy{{At: 1, Inputs: in("a", "x"), Sinks: []string{"out"}, When: carriesCorrupt("x")}}},
					{Name: "T", Inputs: in("a", "out")},
				}, Crashes: 4}
		}},
		{Name: "sink-to-input", Build: func(r *rand.Rand) Spec {
			// N writes t and out; a plain producer writes t too. N's
			// redeploy drops t from its sinks and consumes it: its own
			// sends there are carried (the former sink's acknowledged
			// sends, folded in before the growth seed), so it skips them
			// and delivers the producer's records above them.
			return Spec{Topics: topics(1, "a", "t", "out"),
				Producers: []ProducerSpec{producer("pa", 10, r.IntN(2) == 0, "a"), producer("pt", 8, r.IntN(2) == 0, "t")},
				Nodes: []NodeSpec{
					{Name: "N", Inputs: in("a"), Sinks: []string{"t", "out"}, Logic: Forward("t", "out"),
						Redeploys: []Redeploy{{At: 1, Inputs: in("a", "t"), Sinks: []string{"out"}, Logic: Forward("out")}}},
					{Name: "T", Inputs: in("t", "out")},
				}, Crashes: 3}
		}},
		{Name: "grow-seq", Build: func(r *rand.Rand) Spec {
			// S writes x then d for every record it delivers, so each d
			// record claims S's x sends by sequence only; px and a second
			// stage V write x too, and R relays d into e. N consumes a, d
			// and e, then, once it delivered some of d, drops d and takes
			// x in the same rescope: S's x records are in its carried past
			// with no offset to seed from, so the gate must skip them
			// (never deliver them, never owe them), deliver px's and V's
			// records around them (V's sequences overlap S's), and let
			// the e records claiming them pass. On half the seeds S goes
			// quiet on x after ps's first four records and never crashes
			// (a restart would claim its x sends by offset, and seed N
			// above them): the e records' claims on its last x sends are
			// then met only by the marks the skips set. T judges N's
			// output against x.
			logic, crash := Forward("x", "d"), 0
			if r.IntN(2) == 0 {
				logic = func(rr *rand.Rand, d *protocol.Delivery) []Emission {
					if len(d.Value) > 1 && d.Value[1] < 4 {
						return Forward("x", "d")(rr, d)
					}
					return Forward("d")(rr, d)
				}
				crash = -1
			}
			return Spec{Topics: topics(1, "a", "s", "v", "x", "d", "e", "out"),
				Producers: []ProducerSpec{producer("pa", 10, r.IntN(2) == 0, "a"), producer("ps", 12, r.IntN(2) == 0, "s"),
					producer("pv", 6, r.IntN(2) == 0, "v"), producer("px", 6, r.IntN(2) == 0, "x")},
				Nodes: []NodeSpec{
					{Name: "S", Inputs: in("s"), Sinks: []string{"x", "d"}, Logic: logic, CrashWeight: crash},
					{Name: "V", Inputs: in("v"), Sinks: []string{"x"}, Logic: Forward("x")},
					{Name: "R", Inputs: in("d"), Sinks: []string{"e"}, Logic: Forward("e")},
					{Name: "N", Inputs: in("a", "d", "e"), Sinks: []string{"out"}, Logic: Forward("out"), CrashWeight: 8,
						Redeploys: []Redeploy{{At: 1, Inputs: in("a", "e", "x"), Sinks: []string{"out"}, When: delivered("d")}}},
					{Name: "T", Inputs: in("x", "out")},
				}, Crashes: 6}
		}},
	}
}

// carriesCorrupt is a redeploy condition: the node's causal past holds the
// record on topic name whose stamp does not decode, so growing into that
// topic seeds past it.
func carriesCorrupt(name string) func(*SimNode) bool {
	return func(n *SimNode) bool {
		t := n.w.Broker.Topic(name)
		if t == nil {
			return false
		}
		ch := t.Channel(0)
		hi, ok := n.w.Oracle.Carried(n.actor, ch)
		if !ok {
			return false
		}
		var st headers.Stamp
		for off := n.w.Broker.LogStart(ch); off <= hi; off++ {
			if e := n.w.Broker.Entry(ch, off); e != nil && e.Kind == Business && headers.ReadStamp(&st, e.Headers) != nil {
				return true
			}
		}
		return false
	}
}

// delivered is a redeploy condition: the node has delivered a record on
// topic name.
func delivered(name string) func(*SimNode) bool {
	return func(n *SimNode) bool {
		t := n.w.Broker.Topic(name)
		return t != nil && n.w.Oracle.last(n.actor, t.Channel(0))
	}
}

// carriesUndelivered is a redeploy condition: the node's causal past holds
// a record on topic name that it has not delivered, so growing into the
// topic finds claims on it the node has not resolved.
func carriesUndelivered(name string) func(*SimNode) bool {
	return func(n *SimNode) bool {
		t := n.w.Broker.Topic(name)
		if t == nil {
			return false
		}
		ch := t.Channel(0)
		ac := n.w.Oracle.actors[n.actor]
		found := false
		ac.cur.past.each(func(x int) bool {
			if n.w.Oracle.recs[x].coord.Channel == ch && !ac.cur.delivered.has(x) {
				found = true
				return false
			}
			return true
		})
		return found
	}
}

// signMix reports whether two of chs's topics differ in the sign bit of
// their IDs' high halves, and whether two share the high half and differ
// in the sign bit of the low one: the shapes where Java's signed UUID
// order and byte order disagree.
func signMix(chs []headers.Channel) (hi, lo bool) {
	for i, a := range chs {
		for _, b := range chs[i+1:] {
			if a.Topic == b.Topic {
				continue
			}
			if (a.Topic[0]^b.Topic[0])&0x80 != 0 {
				hi = true
			}
			if [8]byte(a.Topic[:8]) == [8]byte(b.Topic[:8]) && (a.Topic[8]^b.Topic[8])&0x80 != 0 {
				lo = true
			}
		}
	}
	return hi, lo
}

// noteFed counts the gap families' states for one fed record: st is its
// decoded stamp (nil when it does not decode), replay whether the node
// dropped it as one, held whether it stayed in a queue.
func (n *SimNode) noteFed(rec *protocol.Record, st *headers.Stamp, replay, held bool) {
	s := &n.w.stats
	if st == nil {
		if replay {
			s.UndecodableReplays++
		}
		return
	}
	if held && st.Clock.NumOffsets() > 8*len(n.inputs) {
		s.WideClaimsHeld++
	}
	for e := range st.Clock.SeqEntries() {
		if m, ok := n.regrown[e.Channel]; ok && e.Channel != rec.Channel {
			if seq, ok := m[e.Sender]; ok && seq >= e.Seq {
				s.KeptMarkClaims++ // only the mark kept across the shrink resolves it
			}
		}
	}
}

// noteStamp counts a stamp that, after a regrowth, still carries another
// sender's sequence claim on the regrown input that the node has not
// resolved: the normalisation must keep it.
func (n *SimNode) noteStamp(st *headers.Stamp) {
	if len(n.regrown) == 0 || st.Clock.NumSeqs() == 0 {
		return
	}
	states, ok := inspect(n.proto)
	if !ok {
		return
	}
	for e := range st.Clock.SeqEntries() {
		if _, ok := n.regrown[e.Channel]; !ok || e.Sender == st.Sender {
			continue
		}
		met := false
		for i := range states {
			if states[i].Channel != e.Channel {
				continue
			}
			for _, m := range states[i].Delivered {
				if m.Sender == e.Sender && m.Seq >= e.Seq {
					met = true
				}
			}
		}
		if !met && n.w.Oracle.inPast(n.actor, e) {
			n.w.stats.RegrowUnresolved++ // dropping it would leave a real ancestor unclaimed
			return
		}
	}
}

// noteRegrown remembers, for each input this incarnation took back after
// an earlier scope dropped it, the delivered marks the node restored.
func (n *SimNode) noteRegrown(prevInputs []headers.Channel) {
	defer func() {
		if n.everIn == nil {
			n.everIn = map[headers.Channel]bool{}
		}
		for _, ch := range n.inputs {
			n.everIn[ch] = true
		}
	}()
	if slices.Equal(prevInputs, n.inputs) {
		return // no rescope: what the last one took back stays taken back
	}
	n.regrown = nil
	states, ok := inspect(n.proto)
	for _, ch := range n.inputs {
		if !n.everIn[ch] || containsChan(prevInputs, ch) || !ok {
			continue
		}
		m := map[headers.SenderID]int64{}
		for i := range states {
			if states[i].Channel == ch {
				for _, d := range states[i].Delivered {
					m[d.Sender] = d.Seq
				}
			}
		}
		if n.regrown == nil {
			n.regrown = map[headers.Channel]map[headers.SenderID]int64{}
		}
		n.regrown[ch] = m
	}
}

// noteDrainFolds counts, between two consecutive views of the watermarks,
// a queue that drained and folded its frontier onto a position reported
// while it was held, landing on an offset that holds no business record
// (a trailing marker a legacy writer's claim may name).
func (n *SimNode) noteDrainFolds(states []protocol.InputState) {
	prev := n.lastStates
	n.lastStates = states
	for i := range states {
		s := &states[i]
		for j := range prev {
			p := &prev[j]
			if p.Channel != s.Channel {
				continue
			}
			if p.Held > 0 && p.Position-1 > p.Frontier && s.Held == 0 && s.Position == p.Position && s.Frontier == s.Position-1 {
				if e := n.w.Broker.Entry(s.Channel, s.Frontier); e != nil && e.Kind != Business {
					n.w.stats.DrainFoldsOntoMarker++
				}
			}
		}
	}
}

// noteSkipMarkClaims counts a delivery with a sequence claim on another
// input that no delivery there met, on a record the node carries there:
// only the mark its skip set let the delivery through.
func (n *SimNode) noteSkipMarkClaims(d *protocol.Delivery) {
	if d.Stamp.Clock.NumSeqs() == 0 {
		return
	}
	for e := range d.Stamp.Clock.SeqEntries() {
		if e.Channel == d.Channel || !containsChan(n.inputs, e.Channel) {
			continue
		}
		if s, ok := n.seqSeen[e.Channel][e.Sender]; ok && s >= e.Seq {
			continue
		}
		if n.w.Oracle.skipped(n.actor, e) {
			n.w.stats.SkipMarkClaims++
			return
		}
	}
}

// skipped reports whether the record a sequence claim names is in actor
// a's skip set: carried history on a channel it grew into.
func (o *Oracle) skipped(a int, e headers.SeqEntry) bool {
	found := false
	o.actors[a].skip.each(func(x int) bool {
		r := &o.recs[x]
		if r.tagged && r.coord.Channel == e.Channel && r.sender == e.Sender && r.seq == e.Seq {
			found = true
			return false
		}
		return true
	})
	return found
}

// inPast reports whether the record a sequence claim names is in actor a's
// causal past and not delivered there.
func (o *Oracle) inPast(a int, e headers.SeqEntry) bool {
	ac := o.actors[a]
	found := false
	ac.cur.past.each(func(x int) bool {
		r := &o.recs[x]
		if r.tagged && r.coord.Channel == e.Channel && r.sender == e.Sender && r.seq == e.Seq && !ac.cur.delivered.has(x) {
			found = true
			return false
		}
		return true
	})
	return found
}

// last reports whether actor a delivered anything on ch.
func (o *Oracle) last(a int, ch headers.Channel) bool {
	_, ok := o.actors[a].cur.last[ch]
	return ok
}
