package protocol

import (
	"math/bits"

	"github.com/parsley-go/parsley/headers"
)

// OnRecord feeds one fetched record and returns the records it releases,
// in delivery order (host duty H1: per channel, strictly increasing
// offsets).
//
// A record at or below its channel's frontier is a replay: it is dropped
// and counted. Otherwise its clock is folded into its channel's advertised
// clock, it joins the channel's hold queue, and the cascade runs to
// fixpoint. The returned slice is reused by the next call (see Delivery).
//
// Refused without any change to the node: a record on an undeclared channel
// (ErrUndeclaredChannel), an offset at or below one already fed on its
// channel (ErrOutOfOrderFeed), a negative offset (ErrInvalidRecord), and a
// stamp that does not decode (headers.ErrUndecodable) — the caller fails
// the step rather than treat present metadata as absent.
func (n *Node) OnRecord(rec *Record) ([]Delivery, error) {
	const op = "OnRecord"
	if err := n.check(op); err != nil {
		return nil, err
	}
	n.resetOut()
	in := n.input(rec.Channel)
	if in == nil {
		return nil, coordErr(op, rec.Channel, rec.Offset, ErrUndeclaredChannel)
	}
	if rec.Offset < 0 {
		return nil, coordErr(op, rec.Channel, rec.Offset, ErrInvalidRecord)
	}
	if rec.Offset <= in.fed {
		return nil, coordErr(op, rec.Channel, rec.Offset, because(ErrOutOfOrderFeed, "already fed offset "+itoa(in.fed)))
	}
	// A replay is dropped before its stamp is read: the node accounted for
	// the offset already, so what its metadata says cannot matter, and a
	// stamp that does not decode must not refuse a record that is never
	// delivered.
	if (rec.Offset <= in.frontier || rec.Offset <= in.accounted) && !n.sabotage.has(sabAdmitReplays) {
		in.fed = rec.Offset
		n.counters.ReplaysSkipped++
		return n.out, nil
	}
	if err := headers.ReadStamp(&n.scratch, rec.Headers); err != nil {
		if !n.sabotage.has(sabUndecodableAsAbsent) {
			return nil, coordErr(op, rec.Channel, rec.Offset, err)
		}
		n.scratch.Reset()
	}
	in.fed = rec.Offset
	// Fold at receive, not at delivery: an over-claim only delays, and every
	// later stamp must dominate the whole clock of every record delivered.
	if !n.scratch.Clock.IsEmpty() && !n.sabotage.has(sabSkipReceiveFold) {
		fold(&in.cc, &n.scratch.Clock)
		fold(&n.agg, &n.scratch.Clock)
		in.ccDirty = true
	}
	q := &in.q
	idx := q.tail()
	if q.len() > 0 {
		// Behind a held head: nothing the gate reads changes.
		if len(q.pending) == 0 {
			q.pendingBase = idx
		}
		q.pending = append(q.pending, *rec)
		q.push(n.skeleton(in, rec, &n.scratch))
		n.held++
		return n.out, nil
	}
	// The record is the head of an empty queue. Any pending records were
	// delivered (the queue is empty), so pending restarts after this head.
	if len(q.pending) > 0 {
		clear(q.pending)
		q.pending = q.pending[:0]
	}
	q.push(n.skeleton(in, rec, &n.scratch))
	q.loaded = true
	q.head = *rec
	q.headStmp, n.scratch = n.scratch, q.headStmp
	n.held++
	n.nonEmpty++
	raised := n.raiseFrontier(in, rec.Offset-1) // seed / bridge: the run below was skipped
	if n.carriedHead(in) {
		if err := n.skipCarried(in); err != nil {
			return nil, err
		}
		if n.nonEmpty == 0 {
			return n.out, nil
		}
	} else if n.deliverable(in, &q.headStmp) {
		if err := n.deliver(in); err != nil {
			return nil, err
		}
		if n.nonEmpty == 0 {
			return n.out, nil
		}
	} else if !raised {
		return n.out, nil // held, and nothing any other head waits on moved
	}
	if err := n.cascade(); err != nil {
		return nil, err
	}
	return n.out, nil
}

// PositionAdvance reports that the consumer's position on ch is pos:
// everything below pos was fetched or skipped, and every record fetched
// below pos has been fed (host duty H2). When ch's queue is empty (now, or
// once it drains) the frontier folds to pos-1; then the cascade runs. This
// is what releases claims naming trailing transaction markers.
func (n *Node) PositionAdvance(ch headers.Channel, pos int64) ([]Delivery, error) {
	const op = "PositionAdvance"
	if err := n.check(op); err != nil {
		return nil, err
	}
	n.resetOut()
	in, ok := n.byChan[ch]
	if !ok {
		return nil, coordErr(op, ch, pos, ErrUndeclaredChannel)
	}
	if pos < 0 {
		return nil, coordErr(op, ch, pos, ErrInvalidRecord)
	}
	if pos <= in.position {
		return n.out, nil
	}
	in.position = pos
	if in.q.len() > 0 || pos-1 <= in.frontier {
		return n.out, nil
	}
	n.raiseFrontier(in, pos-1)
	n.counters.PositionFolds++
	if n.nonEmpty > 0 {
		if err := n.cascade(); err != nil {
			return nil, err
		}
	}
	return n.out, nil
}

// Release runs the cascade to fixpoint and returns what it releases. The
// host calls it once after New: restored held records can be deliverable
// when a rescope removed an input their claims named. At any other time it
// returns nothing, because every other call already cascades to fixpoint.
func (n *Node) Release() ([]Delivery, error) {
	if err := n.check("Release"); err != nil {
		return nil, err
	}
	n.resetOut()
	if err := n.cascade(); err != nil {
		return nil, err
	}
	return n.out, nil
}

// input returns the input consuming ch, or nil. A few inputs are compared
// directly: hashing a channel costs more than a handful of compares.
func (n *Node) input(ch headers.Channel) *input {
	if len(n.inputs) <= 8 {
		for _, in := range n.inputs {
			if in.ch == ch {
				return in
			}
		}
		return nil
	}
	return n.byChan[ch]
}

func (n *Node) raiseFrontier(in *input, f int64) bool {
	if f > in.frontier {
		in.frontier = f
		in.frontierDirty = true
		return true
	}
	return false
}

// cascade evaluates heads in channel order, delivering every deliverable
// head, until a full pass delivers nothing. The order is fixed by the
// sorted inputs, so a run is determined by its inputs.
func (n *Node) cascade() error {
	for progress := true; progress && n.nonEmpty > 0; {
		progress = false
		for _, in := range n.inputs {
			for in.q.len() > 0 {
				if n.carriedHead(in) {
					if err := n.skipCarried(in); err != nil {
						return err
					}
					progress = true
					continue
				}
				if err := n.loadHead(in); err != nil {
					return err
				}
				if !n.deliverable(in, &in.q.headStmp) {
					break
				}
				if err := n.deliver(in); err != nil {
					return err
				}
				progress = true
			}
		}
	}
	return nil
}

// deliverable is the gate: normalise (ignore the record's own channel),
// restrict (ignore channels not consumed here), and require the frontier to
// dominate every offset claim and the delivered-sequence marks to dominate
// every sequence claim.
//
// Restricting reads the clock's claim on every input at once
// (headers.Clock.OffsetsOf: a walk of both sorted lists, or a search per
// input when the clock is much wider), with no conversion per entry. The
// walk over the clock's public entries (offsetsWalk) gives the same answer
// and is kept as the reference the tests compare against.
func (n *Node) deliverable(own *input, s *headers.Stamp) bool {
	if n.sabotage.has(sabIgnoreClaims) {
		return true
	}
	c := &s.Clock
	if n.gateLookup {
		n.gateOffs = c.OffsetsOf(&n.gate, n.gateOffs)
		for i, in := range n.inputs {
			if in != own && n.gateOffs[i] > in.frontier {
				return false
			}
		}
	} else if !n.offsetsWalk(own, c) {
		return false
	}
	if c.NumSeqs() == 0 {
		return true
	}
	j := 0
	for e := range c.SeqEntries() {
		if e.Channel == own.ch {
			continue
		}
		for j < len(n.inputs) && n.inputs[j].ch.Compare(e.Channel) < 0 {
			j++
		}
		if j == len(n.inputs) {
			break
		}
		if n.inputs[j].ch == e.Channel {
			if m, ok := n.inputs[j].ds[e.Sender]; !ok || m.seq < e.Seq {
				return false
			}
		}
	}
	return true
}

// offsetsWalk is the merge-walk form of the offset half of the gate.
func (n *Node) offsetsWalk(own *input, c *headers.Clock) bool {
	j := 0
	for e := range c.OffsetEntries() {
		if e.Channel == own.ch {
			continue
		}
		for j < len(n.inputs) && n.inputs[j].ch.Compare(e.Channel) < 0 {
			j++
		}
		if j == len(n.inputs) {
			break
		}
		if n.inputs[j].ch == e.Channel && n.inputs[j].frontier < e.Offset {
			return false
		}
	}
	return true
}

// deliver releases the loaded head of in's queue. A head at or below the
// frontier would move the frontier backwards (or deliver an offset twice):
// the state that let it get there is inconsistent, so the node fails
// rather than let the frontier, and every stamp after it, claim less than
// was delivered.
func (n *Node) deliver(in *input) error {
	q := &in.q
	if o := q.at(0).offset; o <= in.frontier {
		return n.fail(coordErr("deliver", in.ch, o, because(ErrCorruptState,
			"delivery would move the frontier back from "+itoa(in.frontier))))
	}
	i := len(n.out)
	if i < cap(n.out) {
		n.out = n.out[:i+1]
	} else {
		n.out = append(n.out, Delivery{})
	}
	d := &n.out[i]
	d.Record = q.head
	d.Stamp, q.headStmp = q.headStmp, d.Stamp
	if d.Stamp.Tagged {
		n.markPassed(in, d.Stamp.Sender, d.Stamp.Seq, d.Offset)
	}
	n.counters.Delivered++
	n.passHead(in)
	return nil
}

// carriedHead reports whether the head of in's queue is a record carried
// ancestry already holds: its sender's sequence is at or below a sequence
// claim carried on in's channel. The node's past holds it (it reached the
// node through a departing input's clock), so delivering it would
// re-enter history (reference 05: skipped, never re-entered).
func (n *Node) carriedHead(in *input) bool {
	if in.carriedSeq == nil {
		return false
	}
	k := in.q.at(0)
	if k.sender == 0 {
		return false
	}
	c, ok := in.carriedSeq[n.senders.ids[k.sender-1]]
	return ok && k.seq <= c
}

// skipCarried passes the head of in's queue without delivering it, as a
// delivery passes it: the frontier and its claim move onto its offset (a
// committed record, now in the node's past), and its sender's mark onto
// its sequence, so claims on it resolve.
func (n *Node) skipCarried(in *input) error {
	k := *in.q.at(0)
	if k.offset <= in.frontier {
		return n.fail(coordErr("skip carried", in.ch, k.offset, because(ErrCorruptState,
			"skip would move the frontier back from "+itoa(in.frontier))))
	}
	n.markPassed(in, n.senders.ids[k.sender-1], k.seq, k.offset)
	n.counters.CarriedSkipped++
	n.passHead(in)
	return nil
}

// markPassed raises sender's delivered-sequence mark on in to seq, the
// record at offset having passed the head.
func (n *Node) markPassed(in *input, sender headers.SenderID, seq, offset int64) {
	if m := in.markOf(sender); m == nil || seq >= m.seq {
		if !containsSender(in.dsDirty, sender) {
			in.dsDirty = append(in.dsDirty, sender)
		}
		in.setMark(sender, dsMark{seq: seq, offset: offset})
	}
}

// passHead pops the head of in's queue, delivered or skipped: the frontier
// and its claim move onto it, then fold what the position or the next
// head reveals.
func (n *Node) passHead(in *input) {
	q := &in.q
	o := q.at(0).offset
	in.frontier = o
	in.claim = o // a business record: committed, claimable
	in.frontierDirty = true
	q.pop()
	n.held--
	if q.len() == 0 {
		n.nonEmpty--
		// A drained queue folds the clean prefix the position revealed.
		if in.position-1 > in.frontier {
			in.frontier = in.position - 1
			n.counters.PositionFolds++
		}
		return
	}
	// The skipped run behind a held head: head-of-line order means every
	// record below the new head was delivered, so the rest was skipped.
	if o := q.at(0).offset - 1; o > in.frontier && !n.sabotage.has(sabSkipHeadFold) {
		in.frontier = o
		n.counters.SkippedRunFolds++
	}
}

func containsSender(s []headers.SenderID, x headers.SenderID) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}

// loadHead makes sure the head's record and decoded stamp are in memory:
// from pending when it arrived since the last flush, else from the store.
func (n *Node) loadHead(in *input) error {
	q := &in.q
	if q.loaded {
		return nil
	}
	const op = "load held record"
	idx := q.headIdx
	if len(q.pending) > 0 && idx >= q.pendingBase {
		q.head = q.pending[idx-q.pendingBase]
	} else {
		k := entryKey(in.key, idx)
		b, ok, err := n.store.Get(k)
		if err != nil {
			return keyErr(op, k, n.fail(err))
		}
		if !ok {
			return n.fail(&Error{Op: op, Channel: in.ch, HasChannel: true, Key: k, Err: because(ErrCorruptState, "held entry missing")})
		}
		q.head = Record{}
		if err := decodeHeld(&q.head, b); err != nil {
			return n.fail(corrupt(op, k, err.Error()))
		}
		q.head.Channel = in.ch
		if q.head.Offset != q.at(0).offset {
			return n.fail(corrupt(op, k, "offset "+itoa(q.head.Offset)+" where the queue holds "+itoa(q.at(0).offset)))
		}
	}
	if err := headers.ReadStamp(&q.headStmp, q.head.Headers); err != nil && !n.sabotage.has(sabUndecodableAsAbsent) {
		return n.fail(coordErr(op, in.ch, q.head.Offset, because(ErrCorruptState, err.Error())))
	}
	q.loaded = true
	return nil
}

// resetOut empties the delivery slice for a new call, dropping it after a
// large cascade so its records and stamps are not kept alive.
func (n *Node) resetOut() {
	if cap(n.out) > 1024 {
		n.out = nil
		return
	}
	n.out = n.out[:0]
}

// fold raises dst to the pointwise maximum of dst and src. Merging walks
// all of dst; when src is much narrower (a record's clock folded into a
// wide stamp-side clock) setting src's entries one by one, each a binary
// search, is cheaper.
func fold(dst, src *headers.Clock) {
	ns, nd := src.NumOffsets(), dst.NumOffsets()
	if src.NumSeqs() > 0 || ns*bits.Len(uint(nd)) >= nd {
		dst.Merge(src)
		return
	}
	for e := range src.OffsetEntries() {
		dst.SetOffset(e.Channel, e.Offset)
	}
}
