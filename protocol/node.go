package protocol

import (
	"context"
	"errors"
	"slices"

	"github.com/parsley-go/parsley/headers"
)

// Record is a fetched record as the host hands it to OnRecord.
//
// The node keeps the Key, Value and Headers slices (without copying) until
// the record is delivered or, if it is held, until the next Flush; the host
// must not modify them meanwhile.
type Record struct {
	headers.Coordinate
	Timestamp int64 // milliseconds since the Unix epoch, as Kafka carries it; opaque to the node
	Key       []byte
	Value     []byte
	Headers   []headers.Header // every header as fetched, the stamp headers included
}

// Delivery is a record released through the gate, for the host to hand to
// user logic in the order returned: the record exactly as fetched (its own
// coordinate, not that of the record whose arrival released it) and its
// decoded stamp.
//
// A []Delivery returned by the node, and the stamps in it, stay valid until
// the node's next OnRecord, PositionAdvance or Release (PrepareSend, Flush,
// ExplainHolds and Counters leave them alone, so a host can stamp the
// outputs of every delivery first); use Clone to keep one longer. The byte
// slices are never modified by the node.
type Delivery struct {
	Record
	Stamp headers.Stamp
}

// Clone returns a copy of d whose stamp does not share storage with the
// node. The byte slices are shared (nobody modifies them).
func (d *Delivery) Clone() Delivery {
	c := Delivery{Record: d.Record}
	c.Stamp.Clock.CopyFrom(&d.Stamp.Clock)
	c.Stamp.Tagged, c.Stamp.Sender, c.Stamp.Seq = d.Stamp.Tagged, d.Stamp.Sender, d.Stamp.Seq
	return c
}

// Config describes a node: its identity, what it consumes and produces, and
// the host's store and broker view.
type Config struct {
	// ApplicationID, Stage and Partition name the task; SenderIDFor derives
	// the node's sender identity from them.
	ApplicationID string
	Stage         string
	Partition     int32

	// Inputs are the channels the node consumes (the received set). Order
	// does not matter; duplicates are refused.
	Inputs []headers.Channel
	// Sinks are the topics the node may send to. Order does not matter.
	Sinks []headers.TopicID

	Store   Store
	Offsets BrokerOffsets
}

// Node is the causal node: the delivery gate with its hold queues, density
// adaptation, the stamp, and the state behind them. It is a deterministic
// state machine: the same configuration, store contents, broker answers and
// sequence of calls give the same results and the same store writes. It is
// not safe for concurrent use.
type Node struct {
	sender  headers.SenderID
	store   Store
	offsets BrokerOffsets

	inputs  []*input // sorted by channel
	byChan  map[headers.Channel]*input
	sinks   []headers.TopicID // sorted
	sinkSet map[headers.TopicID]bool

	carried headers.Clock // ca: delivered past on channels no longer consumed
	own     headers.Clock // own outputs: previous incarnations' committed sends, as of init
	agg     headers.Clock // carried ∪ own ∪ every input's advertised clock
	caDirty bool
	fresh   bool
	upgrade bool // the store is in format version 1

	sq      map[headers.Channel]int64 // last send sequence issued per sink channel
	sqInit  map[headers.Channel]int64 // sq as restored at init
	sent    []headers.Channel         // sink channels sent to this incarnation, sorted
	sentSeq []int64                   // sq of each channel in sent, beside it: the send path reads no map
	sqDirty []headers.Channel
	sqSeed  map[headers.Channel]int64 // first sequence on a sink channel with none stored: its end offset at init

	acked      map[headers.Channel]int64 // highest acknowledged send offset per sink channel, as stored
	ackedDirty []headers.Channel

	senders   []headers.SenderID // interned senders of held records; index+1 in skeletons
	senderIdx map[headers.SenderID]uint32

	gate       headers.ChannelList // the inputs' channels, in n.inputs order, for the gate's lookups
	gateOffs   []int64             // the gate's scratch: a stamp's claim on each input
	gateLookup bool                // read claims with OffsetsOf, not the entry walk (tests compare the two)
	sabotage   sabotageSet         // verification builds only; see sabotage.go

	nonEmpty int // inputs with a non-empty queue
	held     int
	out      []Delivery
	scratch  headers.Stamp
	counters Counters
	failed   error
}

// input is the state of one consumed channel.
type input struct {
	ch  headers.Channel
	key string // chanKey(ch)

	frontier  int64 // contiguous delivered-or-skipped watermark; -1 = nothing
	claim     int64 // highest offset ≤ frontier known to hold a committed record; -1 = none
	fed       int64 // highest offset fed in this incarnation; -1 = none
	accounted int64 // highest offset accounted for at init (frontier or held tail)
	position  int64 // highest consumer position reported; 0 = none

	cc headers.Clock                // advertised clock: folded clocks of records received here
	ds map[headers.SenderID]*dsMark // entries are updated in place, never replaced

	frontierDirty bool
	ccDirty       bool
	dsDirty       []headers.SenderID

	q queue

	lastSender uint32 // interned index (index+1 in Node.senders) of the last tagged record's sender; 0 none

	lastMark       *dsMark // ds[lastMarkSender], the mark delivery touched last
	lastMarkSender headers.SenderID
}

type dsMark struct{ seq, offset int64 }

// markOf returns sender's delivered-sequence mark on in, or nil. A channel's
// records mostly come from one writer, so the last mark found is kept and
// a repeat skips the map.
func (in *input) markOf(sender headers.SenderID) *dsMark {
	if in.lastMark != nil && in.lastMarkSender == sender {
		return in.lastMark
	}
	m := in.ds[sender]
	if m != nil {
		in.lastMark, in.lastMarkSender = m, sender
	}
	return m
}

// setMark sets sender's delivered-sequence mark on in.
func (in *input) setMark(sender headers.SenderID, v dsMark) {
	m := in.markOf(sender)
	if m == nil {
		m = new(dsMark)
		in.ds[sender] = m
		in.lastMark, in.lastMarkSender = m, sender
	}
	*m = v
}

// New builds a node from cfg: it restores the state in cfg.Store and the own
// outputs (the sends acknowledged through Sent), reads the sinks' end
// offsets (where sequences start on sink channels with none stored), and
// rescopes against the scope the state was written under (host duty H5). It writes the reconciled state to
// the store (init is idempotent: building a node twice over the same store
// writes the same bytes) and returns the node ready for records.
//
// After New, call Release once: a rescope that shrank the inputs can make
// restored held records deliverable. ResumePositions says where to fetch.
func New(ctx context.Context, cfg Config) (*Node, error) {
	var correct sabotageSet
	return newNode(ctx, cfg, correct)
}

func newNode(ctx context.Context, cfg Config, sab sabotageSet) (*Node, error) {
	if err := checkConfig(&cfg); err != nil {
		return nil, err
	}
	n := &Node{
		sender:    SenderIDFor(cfg.ApplicationID, cfg.Stage, cfg.Partition),
		store:     cfg.Store,
		offsets:   cfg.Offsets,
		byChan:    make(map[headers.Channel]*input, len(cfg.Inputs)),
		sinkSet:   make(map[headers.TopicID]bool, len(cfg.Sinks)),
		sq:        make(map[headers.Channel]int64),
		sqInit:    make(map[headers.Channel]int64),
		sqSeed:    make(map[headers.Channel]int64),
		acked:     make(map[headers.Channel]int64),
		senderIdx: make(map[headers.SenderID]uint32),
	}
	chans := slices.Clone(cfg.Inputs)
	slices.SortFunc(chans, headers.Channel.Compare)
	for _, ch := range chans {
		in := &input{ch: ch, key: chanKey(ch), frontier: -1, claim: -1, fed: -1, accounted: -1, ds: make(map[headers.SenderID]*dsMark)}
		n.inputs = append(n.inputs, in)
		n.byChan[ch] = in
	}
	n.gate = headers.NewChannelList(chans)
	n.gateLookup = true
	n.sabotage = sab
	n.sinks = slices.Clone(cfg.Sinks)
	slices.SortFunc(n.sinks, headers.TopicID.Compare)
	for _, t := range n.sinks {
		n.sinkSet[t] = true
	}
	if err := n.init(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

func checkConfig(cfg *Config) error {
	bad := func(reason string) error { return &Error{Op: "New", Err: because(ErrInvalidConfig, reason)} }
	switch {
	case cfg.Store == nil:
		return bad("no Store")
	case cfg.Offsets == nil:
		return bad("no BrokerOffsets")
	case cfg.Partition < 0:
		return bad("negative task partition")
	}
	seen := make(map[headers.Channel]bool, len(cfg.Inputs))
	for _, ch := range cfg.Inputs {
		if ch.Topic.IsZero() || ch.Partition < 0 {
			return &Error{Op: "New", Channel: ch, HasChannel: true, Err: because(ErrInvalidConfig, "zero topic ID or negative partition")}
		}
		if seen[ch] {
			return &Error{Op: "New", Channel: ch, HasChannel: true, Err: because(ErrInvalidConfig, "input declared twice")}
		}
		seen[ch] = true
	}
	sinks := make(map[headers.TopicID]bool, len(cfg.Sinks))
	for _, t := range cfg.Sinks {
		if t.IsZero() {
			return bad("zero sink topic ID")
		}
		if sinks[t] {
			return &Error{Op: "New", Topic: t, Err: because(ErrInvalidConfig, "sink declared twice")}
		}
		sinks[t] = true
	}
	return nil
}

// init restores, rescopes and seeds. It validates everything before it
// writes anything, so a refused init leaves the store untouched.
func (n *Node) init(ctx context.Context) error {
	const op = "init"
	st := n.store
	// Format version.
	v, ok, err := st.Get(keyVersion)
	if err != nil {
		return keyErr(op, keyVersion, err)
	}
	var prev scope
	hadScope := false
	if ok {
		if len(v) != 4 || v[0] != 0 || v[1] != 0 || v[2] != 0 || (v[3] != formatVersion && v[3] != formatVersion1) {
			return keyErr(op, keyVersion, because(ErrUnknownStateFormat, "version bytes "+hexBytes(v)))
		}
		// Version 1 differs only in what version 2 adds (a frontier's claim,
		// acknowledged sends); it upgrades in place, and a build that knows
		// only version 1 refuses the result rather than misread it.
		n.upgrade = v[3] != formatVersion
		sv, ok, err := st.Get(keyScope)
		if err != nil {
			return keyErr(op, keyScope, err)
		}
		if !ok {
			return corrupt(op, keyScope, "missing")
		}
		if prev, err = decodeScope(sv); err != nil {
			return corrupt(op, keyScope, err.Error())
		}
		hadScope = true
	} else {
		// No version: the store must be empty of protocol state; anything
		// else was written by a format this build does not know.
		var found string
		for _, p := range []string{keyScope, keyCarried, pfxFront, pfxCC, pfxQueue, pfxSeq, pfxDS, pfxAcked} {
			err := st.Scan(p, func(k string, _ []byte) error { found = k; return errStop })
			if err != nil && !errors.Is(err, errStop) {
				return keyErr(op, p, err)
			}
			if found != "" {
				return keyErr(op, found, because(ErrUnknownStateFormat, "state without a format version"))
			}
		}
		n.fresh = true
	}

	// Carried ancestry.
	if b, ok, err := st.Get(keyCarried); err != nil {
		return keyErr(op, keyCarried, err)
	} else if ok {
		if err := headers.DecodeVCInto(&n.carried, b); err != nil {
			return keyErr(op, keyCarried, because(ErrCorruptState, err.Error()))
		}
	}

	// Current inputs.
	prevInputs := make(map[headers.Channel]bool, len(prev.inputs))
	for _, ch := range prev.inputs {
		prevInputs[ch] = true
	}
	for _, in := range n.inputs {
		if err := n.restoreInput(in); err != nil {
			return err
		}
	}

	// Departing inputs (shrink): refuse held records first, then fold.
	var departing []headers.Channel
	for _, ch := range prev.inputs {
		if _, ok := n.byChan[ch]; !ok {
			departing = append(departing, ch)
		}
	}
	slices.SortFunc(departing, headers.Channel.Compare)
	type fold struct {
		ch    headers.Channel
		claim int64
		cc    headers.Clock
		keys  []string
	}
	var folds []fold
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
		f := fold{ch: ch, claim: -1, keys: []string{pfxFront + ck, pfxCC + ck, metaKey(ck)}}
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
		folds = append(folds, f)
	}

	// Send sequences.
	err = scanChannelInts(st, op, pfxSeq, func(ch headers.Channel, v int64) {
		n.sq[ch] = v
		n.sqInit[ch] = v
	})
	if err != nil {
		return err
	}

	// Own outputs and former sinks (own.go).
	formerOwn, err := n.restoreOwn(ctx, prev.sinks)
	if err != nil {
		return err
	}

	// Everything is validated: apply the rescope.
	for i := range folds {
		f := &folds[i]
		if f.claim >= 0 {
			n.carried.SetOffset(f.ch, f.claim)
		}
		n.carried.Merge(&f.cc)
		n.caDirty = true
	}
	if !formerOwn.IsEmpty() {
		n.carried.Merge(&formerOwn)
		n.caDirty = true
	}
	// Growth seeds only after the whole rescope is folded in, so a channel
	// that left the sinks (or the inputs) and joins the inputs in this same
	// init is seeded from what that fold carries.
	for _, in := range n.inputs {
		if hadScope && !prevInputs[in.ch] {
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
	n.rebuildAgg()
	if n.fresh || n.upgrade {
		if err := st.Put(keyVersion, []byte{0, 0, 0, formatVersion}); err != nil {
			return keyErr(op, keyVersion, n.fail(err))
		}
	}
	cur := scope{sinks: n.sinks}
	for _, in := range n.inputs {
		cur.inputs = append(cur.inputs, in.ch)
	}
	if !hadScope || !slices.Equal(cur.inputs, prev.inputs) || !slices.Equal(cur.sinks, prev.sinks) {
		if err := st.Put(keyScope, encodeScope(cur)); err != nil {
			return keyErr(op, keyScope, n.fail(err))
		}
	}
	for _, f := range folds {
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
// delivered-sequence marks and hold queue.
func (n *Node) restoreInput(in *input) error {
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
	return n.restoreQueue(in)
}

// restoreQueue rebuilds a hold queue's skeletons from its indices and
// entries, decoding every entry once so corruption is refused before
// anything is delivered.
func (n *Node) restoreQueue(in *input) error {
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
		if err := headers.ReadStamp(&n.scratch, rec.Headers); err != nil {
			return &Error{Op: op, Channel: in.ch, Offset: rec.Offset, HasChannel: true, HasOffset: true, Key: k, Err: because(ErrCorruptState, err.Error())}
		}
		q.push(n.skeleton(in, &rec, &n.scratch))
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
		if err := n.store.Delete(entryKey(in.key, t)); err != nil {
			return err
		}
		if err := n.store.Put(mk, appendInt64(appendInt64(nil, h), t)); err != nil {
			return err
		}
	}
	if next != t {
		return &Error{Op: op, Channel: in.ch, HasChannel: true, Key: mk,
			Err: because(ErrCorruptState, "indices claim "+itoa(t-h)+" held records, store has "+itoa(next-h))}
	}
	if q.len() > 0 {
		n.nonEmpty++
		n.held += q.len()
		// The head rule: everything below the head was delivered or skipped.
		if o := q.at(0).offset - 1; o > in.frontier {
			in.frontier = o
			in.frontierDirty = true
		}
	}
	return nil
}

func (n *Node) skeleton(in *input, r *Record, s *headers.Stamp) skel {
	k := skel{offset: r.Offset, timestamp: r.Timestamp}
	if s.Tagged {
		k.sender, k.seq = n.internSender(in, s.Sender), s.Seq
	}
	return k
}

// internSender returns id's index+1 in n.senders, adding it if new. A
// channel's records mostly come from one writer, so in remembers the last
// one and a repeat skips the map; interned indices never change.
func (n *Node) internSender(in *input, id headers.SenderID) uint32 {
	if i := in.lastSender; i > 0 && n.senders[i-1] == id {
		return i
	}
	idx, ok := n.senderIdx[id]
	if !ok {
		n.senders = append(n.senders, id)
		idx = uint32(len(n.senders))
		n.senderIdx[id] = idx
	}
	in.lastSender = idx
	return idx
}

// rebuildAgg recomputes the stamp-side union from its parts.
func (n *Node) rebuildAgg() {
	n.agg.CopyFrom(&n.carried)
	n.agg.Merge(&n.own)
	for _, in := range n.inputs {
		n.agg.Merge(&in.cc)
	}
}

// fail records err as the node's sticky failure and returns it.
func (n *Node) fail(err error) error {
	if n.failed == nil {
		n.failed = err
	}
	return err
}

func (n *Node) check(op string) error {
	if n.failed != nil {
		return &Error{Op: op, Err: errors.Join(ErrNodeFailed, n.failed)}
	}
	return nil
}

// Sender returns the node's sender identity.
func (n *Node) Sender() headers.SenderID { return n.sender }

// Inputs returns the declared input channels in clock order.
func (n *Node) Inputs() []headers.Channel {
	out := make([]headers.Channel, len(n.inputs))
	for i, in := range n.inputs {
		out[i] = in.ch
	}
	return out
}

// Position is a channel and an offset on it.
type Position struct {
	Channel headers.Channel
	Offset  int64
}

// ResumePositions returns, per input channel the node has accounted for,
// the lowest offset it still needs: one past its frontier or its last held
// record, whichever is higher. The host fetches each channel from the higher
// of its committed consumer position and this offset; a channel absent from
// the list has no such floor. After a rescope that added an input, this is
// how the host skips the history the node already accounts for through
// carried ancestry. Records below are dropped by the replay guard anyway.
// Sorted by channel.
func (n *Node) ResumePositions() []Position {
	var out []Position
	for _, in := range n.inputs {
		a := max(in.frontier, in.accounted, in.fed)
		if l := in.q.len(); l > 0 {
			a = max(a, in.q.at(l-1).offset)
		}
		if a >= 0 {
			out = append(out, Position{Channel: in.ch, Offset: a + 1})
		}
	}
	return out
}
