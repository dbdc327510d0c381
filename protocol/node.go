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

	senders senderTable // interned senders of held records

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
	// carriedSeq is carried ancestry's sequence claims on this channel, by
	// sender (nil when there are none, as almost always): records they
	// cover are in the node's past already and are skipped at the head.
	carriedSeq map[headers.SenderID]int64

	frontierDirty bool
	ccDirty       bool
	dsDirty       []headers.SenderID

	q queue

	lastSender uint32 // interned index (index+1 in Node.senders.ids) of the last tagged record's sender; 0 none

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
	n := build(&cfg, sab)
	if err := n.init(ctx); err != nil {
		return nil, err
	}
	return n, nil
}

// build returns the node cfg declares, with nothing restored: every input
// empty, no sequences, no carried ancestry. It reads neither the store nor
// the broker.
func build(cfg *Config, sab sabotageSet) *Node {
	n := &Node{
		sender:  SenderIDFor(cfg.ApplicationID, cfg.Stage, cfg.Partition),
		store:   cfg.Store,
		offsets: cfg.Offsets,
		byChan:  make(map[headers.Channel]*input, len(cfg.Inputs)),
		sinkSet: make(map[headers.TopicID]bool, len(cfg.Sinks)),
		sq:      make(map[headers.Channel]int64),
		sqInit:  make(map[headers.Channel]int64),
		sqSeed:  make(map[headers.Channel]int64),
		acked:   make(map[headers.Channel]int64),
	}
	chans := slices.Clone(cfg.Inputs)
	slices.SortFunc(chans, headers.Channel.Compare)
	for _, ch := range chans {
		in := newInput(ch)
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
	return n
}

func newInput(ch headers.Channel) *input {
	return &input{ch: ch, key: chanKey(ch), frontier: -1, claim: -1, fed: -1, accounted: -1, ds: make(map[headers.SenderID]*dsMark)}
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

func (n *Node) skeleton(in *input, r *Record, s *headers.Stamp) skel {
	return n.senders.skeleton(in, r, s)
}

// senderTable interns the senders of held records: a skeleton names its
// sender by index+1, and interned indices never change.
type senderTable struct {
	ids []headers.SenderID
	idx map[headers.SenderID]uint32
}

func (t *senderTable) skeleton(in *input, r *Record, s *headers.Stamp) skel {
	k := skel{offset: r.Offset, timestamp: r.Timestamp}
	if s.Tagged {
		k.sender, k.seq = t.intern(in, s.Sender), s.Seq
	}
	return k
}

// intern returns id's index+1, adding it if new. A channel's records mostly
// come from one writer, so in remembers the last one and a repeat skips the
// map.
func (t *senderTable) intern(in *input, id headers.SenderID) uint32 {
	if i := in.lastSender; i > 0 && t.ids[i-1] == id {
		return i
	}
	idx, ok := t.idx[id]
	if !ok {
		if t.idx == nil {
			t.idx = make(map[headers.SenderID]uint32)
		}
		t.ids = append(t.ids, id)
		idx = uint32(len(t.ids))
		t.idx[id] = idx
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
