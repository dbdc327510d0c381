package sim

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/parsley-go/parsley/headers"
)

// bitset is a set of oracle record ids.
type bitset []uint64

func (b *bitset) set(i int) {
	w := i >> 6
	for len(*b) <= w {
		*b = append(*b, 0)
	}
	(*b)[w] |= 1 << (uint(i) & 63)
}

func (b bitset) has(i int) bool {
	w := i >> 6
	return w < len(b) && b[w]&(1<<(uint(i)&63)) != 0
}

func (b *bitset) union(o bitset) {
	for len(*b) < len(o) {
		*b = append(*b, 0)
	}
	for i, w := range o {
		(*b)[i] |= w
	}
}

func (b bitset) clone() bitset { return slices.Clone(b) }

// each calls fn for every id in ascending order until fn returns false.
func (b bitset) each(fn func(int) bool) {
	for i, w := range b {
		for w != 0 {
			t := bits.TrailingZeros64(w)
			if !fn(i<<6 + t) {
				return
			}
			w &= w - 1
		}
	}
}

// ViolationKind names the check a delivery failed.
type ViolationKind uint8

const (
	// CausalOrder: an ancestor on a consumed channel, at or above the
	// node's baseline, had not been delivered there first.
	CausalOrder ViolationKind = iota + 1
	// FIFO: a delivery's offset is not above the last delivered on its channel.
	FIFO
	// Duplicate: a record was delivered twice at one node.
	Duplicate
	// Incomplete: at drain, a record above baseline on a consumed channel
	// was never delivered.
	Incomplete
	// Wedged: the world did not drain within its step budget, or a node
	// still held records at drain.
	Wedged
	// HostError: the protocol refused a call, or the host caught a broken
	// duty inline (a stamp claiming an offset never appended).
	HostError
	// Unknown: a delivery names a coordinate that holds no business record.
	Unknown
	// Payload: a delivery's key, value, timestamp or headers differ from
	// the record fetched at its coordinate.
	Payload
	// FailOpen: a record whose stamp does not decode was delivered; the
	// protocol must refuse it rather than read it as absent.
	FailOpen
	// StaleClaim: a stamp still claims a deleted topic after a truncation
	// sweep that should have dropped it.
	StaleClaim
	// StampGap: at send time, a stamp fails to claim a real ancestor of
	// the send that some gate may still have to wait for.
	StampGap
	// Invariant: the protocol's watermarks broke an invariant after a call
	// (a frontier moved back or past what was fetched, a held head sits at
	// or below its frontier, a delivered sequence mark moved back).
	Invariant
	// LostOnResume: ResumePositions skips a record the node has neither
	// delivered nor carried in its causal past.
	LostOnResume
	// Reentered: a node delivered, on a channel it grew into, a record its
	// carried history already holds, or one at or below an offset that
	// history claims there (reference 05: the causal past a node delivered
	// or carried may be skipped, never re-entered).
	Reentered
)

func (k ViolationKind) String() string {
	switch k {
	case CausalOrder:
		return "causal-order"
	case FIFO:
		return "fifo"
	case Duplicate:
		return "duplicate"
	case Incomplete:
		return "incomplete"
	case Wedged:
		return "wedged"
	case HostError:
		return "host-error"
	case Unknown:
		return "unknown-record"
	case Payload:
		return "payload"
	case FailOpen:
		return "fail-open"
	case StaleClaim:
		return "stale-claim"
	case StampGap:
		return "stamp-gap"
	case Invariant:
		return "invariant"
	case LostOnResume:
		return "lost-on-resume"
	case Reentered:
		return "reentered"
	}
	return fmt.Sprintf("ViolationKind(%d)", uint8(k))
}

// Violation is one failed check.
type Violation struct {
	Kind   ViolationKind
	Node   string
	Step   int
	Detail string
}

func (v Violation) String() string {
	return fmt.Sprintf("step %d: %s at %s: %s", v.Step, v.Kind, v.Node, v.Detail)
}

type recInfo struct {
	coord headers.Coordinate
	anc   bitset // real causal past, transitively closed, excluding itself
	actor int
	// The sender tag the record was stamped with, if any (see Tag).
	tagged bool
	sender headers.SenderID
	seq    int64
}

// Oracle is the ground truth. It never reads a clock: it records, for every
// business emission, the emitter's real causal past (everything delivered
// or observed there, plus its own prior sends, transitively closed), and
// judges every delivery against it: causal order, per-channel FIFO, no
// duplicates; at drain, completeness. An actor's knowledge is staged and
// rolled back with its transaction, so an aborted step teaches the oracle
// nothing.
type Oracle struct {
	recs       []recInfo
	byCoord    map[headers.Coordinate]int
	actors     []*actor
	violations []Violation
	step       int
	// Checked counts deliveries judged.
	Checked int
}

type actorState struct {
	past      bitset
	delivered bitset
	last      map[headers.Channel]int64
}

func (s *actorState) clone() actorState {
	c := actorState{past: s.past.clone(), delivered: s.delivered.clone(), last: make(map[headers.Channel]int64, len(s.last))}
	for k, v := range s.last {
		c.last[k] = v
	}
	return c
}

type actor struct {
	name      string
	cur       actorState
	committed actorState
	consumes  map[headers.Channel]int64 // consumed channel → baseline
	gates     bool
	// carried is the history the actor carries past its scope: every
	// record it delivered on an input it has since dropped, with their
	// ancestry, and its own sends to sinks it has since dropped. It never
	// shrinks (a state reset aside).
	carried bitset
	// reentry is, per channel the actor grew into, the highest offset its
	// carried history reaches there by offset claims: no delivery on the
	// channel may be at or below it.
	reentry map[headers.Channel]int64
	// skip holds every carried record on a channel the actor grew into,
	// whatever claims it (an offset, or only its sender's sequence): it is
	// in the actor's past, so it is never delivered there, and never owed.
	skip bitset
}

// NewOracle returns an empty oracle.
func NewOracle() *Oracle { return &Oracle{byCoord: map[headers.Coordinate]int{}} }

// Actor registers a process (a node or a plain client) and returns its
// handle. A gating actor's deliveries are judged; a plain client only
// accumulates causal past.
func (o *Oracle) Actor(name string, gates bool) int {
	o.actors = append(o.actors, &actor{name: name, gates: gates,
		cur: actorState{last: map[headers.Channel]int64{}}, committed: actorState{last: map[headers.Channel]int64{}},
		consumes: map[headers.Channel]int64{}})
	return len(o.actors) - 1
}

// Consume declares that actor a consumes ch from baseline on. A channel
// already consumed keeps its first baseline: history below a node's first
// sighting of a channel is outside its scope.
func (o *Oracle) Consume(a int, ch headers.Channel, baseline int64) {
	if _, ok := o.actors[a].consumes[ch]; !ok {
		o.actors[a].consumes[ch] = baseline
	}
}

// Unconsume drops ch from actor a's consumed set (a scope shrink): what a
// delivered there, and its ancestry, becomes carried history.
func (o *Oracle) Unconsume(a int, ch headers.Channel) {
	ac := o.actors[a]
	delete(ac.consumes, ch)
	ac.cur.delivered.each(func(x int) bool {
		if o.recs[x].coord.Channel == ch {
			ac.carried.set(x)
			ac.carried.union(o.recs[x].anc)
		}
		return true
	})
}

// RetireSink records that actor a no longer sends to ch (a sink it
// dropped): its own committed sends there become carried history.
func (o *Oracle) RetireSink(a int, ch headers.Channel) {
	ac := o.actors[a]
	ac.cur.past.each(func(x int) bool {
		if r := &o.recs[x]; r.actor == a && r.coord.Channel == ch {
			ac.carried.set(x)
		}
		return true
	})
}

// Grow records that actor a starts consuming ch, which it did not consume
// before (a scope growth), and returns the re-entry bound it sets: the
// highest offset on ch of a record a carries that some offset claim
// covers, or false when there is none. The protocol seeds a grown input at
// its carried knowledge of the channel, so no later delivery there may be
// at or below that bound.
//
// A carried record counts toward the bound when a delivered it (on the
// input it dropped), sent it (to the sink it dropped), or a plain client
// wrote it (plain clients claim by offset, and no hop turns an offset
// claim into anything else). Every carried record on ch, those a stage's
// sequence claim alone carries included, joins the skip set: delivering
// one is re-entry, and completeness does not owe it.
func (o *Oracle) Grow(a int, ch headers.Channel) (int64, bool) {
	ac := o.actors[a]
	hi, ok := int64(-1), false
	ac.carried.each(func(x int) bool {
		r := &o.recs[x]
		if r.coord.Channel != ch {
			return true
		}
		ac.skip.set(x)
		if r.coord.Offset > hi && (!r.tagged || r.actor == a || ac.cur.delivered.has(x)) {
			hi, ok = r.coord.Offset, true
		}
		return true
	})
	if ok {
		if ac.reentry == nil {
			ac.reentry = map[headers.Channel]int64{}
		}
		if b, has := ac.reentry[ch]; !has || hi > b {
			ac.reentry[ch] = hi
		}
	}
	return hi, ok
}

// SeqCarried counts the records on ch that actor a carries, at or above
// from, that Grow did not bound: stages' records its past holds only
// through their senders' sequence claims, which no offset seed skips.
func (o *Oracle) SeqCarried(a int, ch headers.Channel, from int64) int {
	ac := o.actors[a]
	b, has := ac.reentry[ch]
	k := 0
	ac.skip.each(func(x int) bool {
		if c := o.recs[x].coord; c.Channel == ch && c.Offset >= from && (!has || c.Offset > b) {
			k++
		}
		return true
	})
	return k
}

// Baseline returns actor a's baseline on ch.
func (o *Oracle) Baseline(a int, ch headers.Channel) (int64, bool) {
	b, ok := o.actors[a].consumes[ch]
	return b, ok
}

// NewID reserves an id for a record about to be appended by actor a.
func (o *Oracle) NewID(a int) int {
	o.recs = append(o.recs, recInfo{actor: a})
	return len(o.recs) - 1
}

// Emit records that actor a appended record id at coord: the record's
// ancestry is a's causal past, and the record joins that past.
func (o *Oracle) Emit(a, id int, coord headers.Coordinate) {
	ac := o.actors[a]
	o.recs[id].coord = coord
	o.recs[id].anc = ac.cur.past.clone()
	o.byCoord[coord] = id
	ac.cur.past.set(id)
}

// Observe records that plain client a consumed the record at coord: its
// ancestry and the record join a's past. Nothing is judged.
func (o *Oracle) Observe(a int, coord headers.Coordinate) {
	id, ok := o.byCoord[coord]
	if !ok {
		o.violate(Unknown, o.actors[a].name, "observed "+coord.String())
		return
	}
	ac := o.actors[a]
	ac.cur.past.union(o.recs[id].anc)
	ac.cur.past.set(id)
}

// Deliver judges the delivery of the record at coord to gating actor a.
// It returns false when a check failed.
func (o *Oracle) Deliver(a int, coord headers.Coordinate) bool {
	o.Checked++
	ac := o.actors[a]
	id, ok := o.byCoord[coord]
	if !ok {
		o.violate(Unknown, ac.name, "delivered "+coord.String()+", which holds no committed record")
		return false
	}
	good := true
	if ac.cur.delivered.has(id) {
		o.violate(Duplicate, ac.name, coord.String()+" delivered twice")
		good = false
	}
	if last, ok := ac.cur.last[coord.Channel]; ok && coord.Offset <= last {
		o.violate(FIFO, ac.name, fmt.Sprintf("%v delivered after offset %d", coord, last))
		good = false
	}
	missing := 0
	var first headers.Coordinate
	o.recs[id].anc.each(func(x int) bool {
		c := o.recs[x].coord
		base, consumed := ac.consumes[c.Channel]
		if consumed && c.Offset >= base && !ac.cur.delivered.has(x) && !ac.skip.has(x) {
			if missing == 0 {
				first = c
			}
			missing++
		}
		return true
	})
	if missing > 0 {
		o.violate(CausalOrder, ac.name, fmt.Sprintf("%v delivered before its ancestor %v (%d undelivered ancestors)", coord, first, missing))
		good = false
	}
	if b, ok := ac.reentry[coord.Channel]; ok && coord.Offset <= b {
		o.violate(Reentered, ac.name, fmt.Sprintf("%v delivered, at or below offset %d, which the node carried when it grew into the channel", coord, b))
		good = false
	} else if ac.skip.has(id) {
		o.violate(Reentered, ac.name, fmt.Sprintf("%v delivered, which the node carried in its past when it grew into the channel", coord))
		good = false
	}
	ac.cur.delivered.set(id)
	ac.cur.past.union(o.recs[id].anc)
	ac.cur.past.set(id)
	if coord.Offset > ac.cur.last[coord.Channel] || !hasKey(ac.cur.last, coord.Channel) {
		ac.cur.last[coord.Channel] = coord.Offset
	}
	return good
}

func hasKey(m map[headers.Channel]int64, k headers.Channel) bool { _, ok := m[k]; return ok }

// Commit makes actor a's staged knowledge durable (its step committed).
func (o *Oracle) Commit(a int) { ac := o.actors[a]; ac.committed = ac.cur.clone() }

// Abort rolls actor a's knowledge back to its last commit (its step aborted).
func (o *Oracle) Abort(a int) { ac := o.actors[a]; ac.cur = ac.committed.clone() }

// Delivered reports whether the record at coord was delivered at a.
func (o *Oracle) Delivered(a int, coord headers.Coordinate) bool {
	id, ok := o.byCoord[coord]
	return ok && o.actors[a].cur.delivered.has(id)
}

// Complete checks, at drain, that every business record at or above actor
// a's baseline on each channel it consumes was delivered there, unless it
// is carried history on a channel a grew into (the skip set).
func (o *Oracle) Complete(a int, b *Broker) {
	ac := o.actors[a]
	chans := make([]headers.Channel, 0, len(ac.consumes))
	for ch := range ac.consumes {
		chans = append(chans, ch)
	}
	slices.SortFunc(chans, headers.Channel.Compare)
	for _, ch := range chans {
		base := ac.consumes[ch]
		end := b.End(ch)
		missing := 0
		var first int64
		for off := base; off < end; off++ {
			e := b.Entry(ch, off)
			if e == nil || e.Kind != Business {
				continue
			}
			if !ac.cur.delivered.has(e.ID) && !ac.skip.has(e.ID) {
				if missing == 0 {
					first = off
				}
				missing++
			}
		}
		if missing > 0 {
			o.violate(Incomplete, ac.name, fmt.Sprintf("%d records on %v never delivered, first at offset %d (baseline %d)", missing, ch, first, base))
		}
	}
}

func (o *Oracle) violate(k ViolationKind, node, detail string) {
	o.violations = append(o.violations, Violation{Kind: k, Node: node, Step: o.step, Detail: detail})
}

// Violations returns every failed check so far.
func (o *Oracle) Violations() []Violation { return o.violations }
