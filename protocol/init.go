package protocol

import (
	"context"
	"errors"
	"maps"
	"slices"

	"github.com/parsley-go/parsley/headers"
)

// Init in three steps. A refused init must leave the store as it was, so
// the host can fix its configuration (or its store) and build again:
//
//   - plan reads the store and the broker and returns everything the node
//     will hold, or an error. It writes nothing, to the store or the node.
//   - apply installs a plan in the node. It cannot fail: every check ran in
//     plan.
//   - persist writes the reconciled state. A store error there fails the
//     node, as any write does.
//
// That a refusal comes before any write is then a property of the types,
// not of the order of statements in one long function.

// initPlan is the state init read and the rescope it implies.
type initPlan struct {
	fresh    bool  // the store holds no protocol state
	upgrade  bool  // the store is in format version 1
	hadScope bool  // prev is the scope the state was written under
	prev     scope // the inputs and sinks the state was written under

	carried headers.Clock
	// inputs are the restored current inputs, in n.inputs order: new
	// values, so a refused plan leaves the node's own untouched.
	inputs        []*input
	senders       senderTable
	held          int
	nonEmpty      int
	folds         []shrinkFold // departing inputs, by channel
	sq            map[headers.Channel]int64
	sqSeed        map[headers.Channel]int64
	acked         map[headers.Channel]int64
	own           headers.Clock // the current sinks' own outputs
	formerOwn     headers.Clock // the former sinks' own outputs, to carry
	sabotageWrite []Mutation    // verification builds only: the dropped held record
}

// shrinkFold is a departing input's delivered past, carried once the input
// leaves, and the keys that held its state.
type shrinkFold struct {
	ch    headers.Channel
	claim int64
	cc    headers.Clock
	keys  []string
}

// init restores, rescopes and seeds: plan, apply, persist.
func (n *Node) init(ctx context.Context) error {
	p, err := n.plan(ctx)
	if err != nil {
		return err
	}
	n.apply(p)
	return n.persist(p)
}

// plan reads and validates the stored state and the sinks' offsets. It
// reads the node's configuration only.
func (n *Node) plan(ctx context.Context) (*initPlan, error) {
	const op = "init"
	st := n.store
	p := &initPlan{
		sq:     make(map[headers.Channel]int64),
		sqSeed: make(map[headers.Channel]int64),
		acked:  make(map[headers.Channel]int64),
	}
	// Format version.
	v, ok, err := st.Get(keyVersion)
	if err != nil {
		return nil, keyErr(op, keyVersion, err)
	}
	if ok {
		if len(v) != 4 || v[0] != 0 || v[1] != 0 || v[2] != 0 || (v[3] != formatVersion && v[3] != formatVersion1) {
			return nil, keyErr(op, keyVersion, because(ErrUnknownStateFormat, "version bytes "+hexBytes(v)))
		}
		// Version 1 differs only in what version 2 adds (a frontier's claim,
		// acknowledged sends); it upgrades in place, and a build that knows
		// only version 1 refuses the result rather than misread it.
		p.upgrade = v[3] != formatVersion
		sv, ok, err := st.Get(keyScope)
		if err != nil {
			return nil, keyErr(op, keyScope, err)
		}
		if !ok {
			return nil, corrupt(op, keyScope, "missing")
		}
		if p.prev, err = decodeScope(sv); err != nil {
			return nil, corrupt(op, keyScope, err.Error())
		}
		p.hadScope = true
	} else {
		// No version: the store must be empty of protocol state; anything
		// else was written by a format this build does not know.
		var found string
		for _, pfx := range []string{keyScope, keyCarried, pfxFront, pfxCC, pfxQueue, pfxSeq, pfxDS, pfxAcked} {
			err := st.Scan(pfx, func(k string, _ []byte) error { found = k; return errStop })
			if err != nil && !errors.Is(err, errStop) {
				return nil, keyErr(op, pfx, err)
			}
			if found != "" {
				return nil, keyErr(op, found, because(ErrUnknownStateFormat, "state without a format version"))
			}
		}
		p.fresh = true
	}

	// Carried ancestry.
	if b, ok, err := st.Get(keyCarried); err != nil {
		return nil, keyErr(op, keyCarried, err)
	} else if ok {
		if err := headers.DecodeVCInto(&p.carried, b); err != nil {
			return nil, keyErr(op, keyCarried, because(ErrCorruptState, err.Error()))
		}
	}

	// Current inputs.
	for _, cur := range n.inputs {
		in := newInput(cur.ch)
		if err := p.restoreInput(n, in); err != nil {
			return nil, err
		}
		p.inputs = append(p.inputs, in)
	}

	// Departing inputs (shrink): refuse held records first, then fold.
	if err := p.planFolds(n); err != nil {
		return nil, err
	}

	// Send sequences.
	err = scanChannelInts(st, op, pfxSeq, func(ch headers.Channel, v int64) { p.sq[ch] = v })
	if err != nil {
		return nil, err
	}

	// Own outputs and former sinks (own.go).
	if err := p.restoreOwn(ctx, n); err != nil {
		return nil, err
	}
	return p, nil
}

// planFolds reads each departing input's state. A departing input with
// held records is refused: they would be lost, so the host must drain them
// under the old scope first.
func (p *initPlan) planFolds(n *Node) error {
	const op = "init"
	st := n.store
	var departing []headers.Channel
	for _, ch := range p.prev.inputs {
		if _, ok := n.byChan[ch]; !ok {
			departing = append(departing, ch)
		}
	}
	slices.SortFunc(departing, headers.Channel.Compare)
	for _, ch := range departing {
		ck := chanKey(ch)
		if m, ok, err := st.Get(metaKey(ck)); err != nil {
			return keyErr(op, metaKey(ck), err)
		} else if ok {
			h, t, ok := decodePair(m)
			if !ok || h > t {
				return corrupt(op, metaKey(ck), "bad queue indices")
			}
			if t > h {
				return &Error{Op: op + ": shrink", Channel: ch, HasChannel: true, Key: metaKey(ck),
					Err: because(ErrHeldOnRemovedInput, itoa(t-h)+" held records")}
			}
		}
		var held string
		if err := st.Scan(pfxQueue+ck+"/e/", func(k string, _ []byte) error { held = k; return errStop }); err != nil && !errors.Is(err, errStop) {
			return keyErr(op, pfxQueue+ck, err)
		}
		if held != "" {
			return &Error{Op: op + ": shrink", Channel: ch, HasChannel: true, Key: held, Err: ErrHeldOnRemovedInput}
		}
		// The delivered-sequence marks stay: each names a record at or
		// below the claim carried here, so if the channel returns, the
		// sequence claims they resolved stay resolved although those
		// records are never fetched again.
		f := shrinkFold{ch: ch, claim: -1, keys: []string{pfxFront + ck, pfxCC + ck, metaKey(ck)}}
		if b, ok, err := st.Get(pfxFront + ck); err != nil {
			return keyErr(op, pfxFront+ck, err)
		} else if ok {
			_, c, ok := decodeFrontier(b)
			if !ok {
				return corrupt(op, pfxFront+ck, "want an int64 frontier ≥ -1, optionally with a claim in [-1, frontier]")
			}
			f.claim = c
		}
		if b, ok, err := st.Get(pfxCC + ck); err != nil {
			return keyErr(op, pfxCC+ck, err)
		} else if ok {
			if err := headers.DecodeVCInto(&f.cc, b); err != nil {
				return keyErr(op, pfxCC+ck, because(ErrCorruptState, err.Error()))
			}
		}
		p.folds = append(p.folds, f)
	}
	return nil
}

// apply installs p in n: the restored state, the rescope's folds into
// carried ancestry, and the growth seeds. Everything was checked in plan,
// so nothing here can fail.
func (n *Node) apply(p *initPlan) {
	n.fresh, n.upgrade = p.fresh, p.upgrade
	n.carried = p.carried
	for i, in := range p.inputs {
		n.inputs[i] = in
		n.byChan[in.ch] = in
	}
	n.senders = p.senders
	n.held, n.nonEmpty = p.held, p.nonEmpty
	n.sq, n.sqInit = p.sq, maps.Clone(p.sq)
	n.sqSeed, n.acked = p.sqSeed, p.acked
	n.own = p.own

	for i := range p.folds {
		f := &p.folds[i]
		if f.claim >= 0 {
			n.carried.SetOffset(f.ch, f.claim)
		}
		n.carried.Merge(&f.cc)
		n.caDirty = true
	}
	if !p.formerOwn.IsEmpty() {
		n.carried.Merge(&p.formerOwn)
		n.caDirty = true
	}
	// Growth seeds only after the whole rescope is folded in, so a channel
	// that left the sinks (or the inputs) and joins the inputs in this same
	// init is seeded from what that fold carries.
	prevInputs := make(map[headers.Channel]bool, len(p.prev.inputs))
	for _, ch := range p.prev.inputs {
		prevInputs[ch] = true
	}
	for _, in := range n.inputs {
		if p.hadScope && !prevInputs[in.ch] {
			// Growth: seed at the carried knowledge of the channel, never
			// below it; the host resumes one past it. Carried ancestry
			// names only committed records, so the seed is a claim too.
			if c, ok := n.carried.Offset(in.ch); ok && c > in.frontier {
				in.frontier = c
				in.claim = c
				in.frontierDirty = true
			}
		}
		in.accounted = in.frontier
		if l := in.q.len(); l > 0 {
			in.accounted = max(in.accounted, in.q.at(l-1).offset)
		}
	}
	// History carried by a sender's sequence alone (a stage that wrote a
	// grown channel and a departing input in one incarnation claims its
	// sends there by sequence) has no offset to seed from: the gate skips
	// it record by record instead (skipCarried).
	for e := range n.carried.SeqEntries() {
		if in := n.byChan[e.Channel]; in != nil {
			if in.carriedSeq == nil {
				in.carriedSeq = make(map[headers.SenderID]int64)
			}
			in.carriedSeq[e.Sender] = e.Seq
		}
	}
	n.rebuildAgg()
}

// persist writes what apply changed: the format version, the scope, the
// departed inputs' keys (deleted), and the rest through Flush.
func (n *Node) persist(p *initPlan) error {
	const op = "init"
	st := n.store
	for _, m := range p.sabotageWrite {
		var err error
		if m.Delete {
			err = st.Delete(m.Key)
		} else {
			err = st.Put(m.Key, m.Value)
		}
		if err != nil {
			return keyErr(op, m.Key, n.fail(err))
		}
	}
	if n.fresh || n.upgrade {
		if err := st.Put(keyVersion, []byte{0, 0, 0, formatVersion}); err != nil {
			return keyErr(op, keyVersion, n.fail(err))
		}
	}
	cur := scope{sinks: n.sinks}
	for _, in := range n.inputs {
		cur.inputs = append(cur.inputs, in.ch)
	}
	if !p.hadScope || !slices.Equal(cur.inputs, p.prev.inputs) || !slices.Equal(cur.sinks, p.prev.sinks) {
		if err := st.Put(keyScope, encodeScope(cur)); err != nil {
			return keyErr(op, keyScope, n.fail(err))
		}
	}
	for _, f := range p.folds {
		for _, k := range f.keys {
			if err := st.Delete(k); err != nil {
				return keyErr(op, k, n.fail(err))
			}
		}
	}
	return n.Flush()
}

var errStop = errors.New("stop")

// scanChannelInts reads every key prefix+<ch> holding a non-negative int64
// and hands each to fn.
func scanChannelInts(st Store, op, prefix string, fn func(headers.Channel, int64)) error {
	err := st.Scan(prefix, func(k string, b []byte) error {
		ch, ok := parseChanKey(k[len(prefix):])
		if !ok {
			return corrupt(op, k, "bad channel")
		}
		v, ok := decodeInt64(b)
		if !ok || v < 0 {
			return corrupt(op, k, "want a non-negative int64")
		}
		fn(ch, v)
		return nil
	})
	if err != nil {
		return wrapStore(op, prefix, err)
	}
	return nil
}

func wrapStore(op, key string, err error) error {
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	return keyErr(op, key, err)
}

// restoreInput reads one current input's frontier, advertised clock,
// delivered-sequence marks and hold queue into in.
func (p *initPlan) restoreInput(n *Node, in *input) error {
	const op = "init: restore"
	st := n.store
	if b, ok, err := st.Get(pfxFront + in.key); err != nil {
		return keyErr(op, pfxFront+in.key, err)
	} else if ok {
		f, c, ok := decodeFrontier(b)
		if !ok {
			return corrupt(op, pfxFront+in.key, "want an int64 frontier ≥ -1, optionally with a claim in [-1, frontier]")
		}
		in.frontier, in.claim = f, c
	}
	if b, ok, err := st.Get(pfxCC + in.key); err != nil {
		return keyErr(op, pfxCC+in.key, err)
	} else if ok {
		if err := headers.DecodeVCInto(&in.cc, b); err != nil {
			return keyErr(op, pfxCC+in.key, because(ErrCorruptState, err.Error()))
		}
	}
	dsPfx := pfxDS + in.key + "/"
	err := st.Scan(dsPfx, func(k string, b []byte) error {
		s, err := headers.ParseSenderID(k[len(dsPfx):])
		if err != nil {
			return corrupt(op, k, "bad sender")
		}
		seq, off, ok := decodePair(b)
		if !ok || seq < 0 || off < 0 {
			return corrupt(op, k, "want two non-negative int64s")
		}
		in.setMark(s, dsMark{seq: seq, offset: off})
		return nil
	})
	if err != nil {
		return wrapStore(op, dsPfx, err)
	}
	return p.restoreQueue(n, in)
}

// restoreQueue rebuilds a hold queue's skeletons from its indices and
// entries, decoding every entry once so corruption is refused before
// anything is delivered.
func (p *initPlan) restoreQueue(n *Node, in *input) error {
	const op = "init: restore queue"
	mk := metaKey(in.key)
	m, ok, err := n.store.Get(mk)
	if err != nil {
		return keyErr(op, mk, err)
	}
	var h, t int64
	if ok {
		var good bool
		h, t, good = decodePair(m)
		if !good || h < 0 || h > t {
			return corrupt(op, mk, "bad queue indices")
		}
	}
	q := &in.q
	q.headIdx, q.storedHead, q.flushedTail = h, h, t
	next := h
	prevOff := in.frontier
	var rec Record
	var stamp headers.Stamp
	pfx := pfxQueue + in.key + "/e/"
	err = n.store.Scan(pfx, func(k string, b []byte) error {
		if k != entryKey(in.key, next) || next >= t {
			return &Error{Op: op, Channel: in.ch, HasChannel: true, Key: k,
				Err: because(ErrCorruptState, "entry outside the queue's indices ["+itoa(h)+", "+itoa(t)+") or out of sequence; expected index "+itoa(next))}
		}
		if err := decodeHeld(&rec, b); err != nil {
			return corrupt(op, k, err.Error())
		}
		if rec.Offset <= prevOff {
			return corrupt(op, k, "held offset "+itoa(rec.Offset)+" not above "+itoa(prevOff))
		}
		prevOff = rec.Offset
		if err := headers.ReadStamp(&stamp, rec.Headers); err != nil {
			return &Error{Op: op, Channel: in.ch, Offset: rec.Offset, HasChannel: true, HasOffset: true, Key: k, Err: because(ErrCorruptState, err.Error())}
		}
		q.push(p.senders.skeleton(in, &rec, &stamp))
		next++
		return nil
	})
	if err != nil {
		return wrapStore(op, pfx, err)
	}
	if n.sabotage.has(sabDropHeldRecord) && q.len() > 0 {
		q.skels = q.skels[:len(q.skels)-1]
		t--
		q.flushedTail = t
		next--
		p.sabotageWrite = append(p.sabotageWrite,
			Mutation{Key: entryKey(in.key, t), Delete: true},
			Mutation{Key: mk, Value: appendInt64(appendInt64(nil, h), t)})
	}
	if next != t {
		return &Error{Op: op, Channel: in.ch, HasChannel: true, Key: mk,
			Err: because(ErrCorruptState, "indices claim "+itoa(t-h)+" held records, store has "+itoa(next-h))}
	}
	if q.len() > 0 {
		p.nonEmpty++
		p.held += q.len()
		// The head rule: everything below the head was delivered or skipped.
		if o := q.at(0).offset - 1; o > in.frontier {
			in.frontier = o
			in.frontierDirty = true
		}
	}
	return nil
}
