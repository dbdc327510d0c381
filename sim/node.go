package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
)

// Ref names a partition of a topic by topic name, resolved to the topic's
// live incarnation when used.
type Ref struct {
	Topic     string
	Partition int32
	// From overrides the node's StartMode for this input.
	From StartMode
}

// StartMode is where a node with no committed position starts fetching.
type StartMode uint8

const (
	// Default is the node's StartMode, or Earliest.
	Default StartMode = iota
	// Earliest starts at the log start.
	Earliest
	// Latest starts at the log end (an at-latest late joiner).
	Latest
	// LastStable starts at the last stable offset.
	LastStable
	// AtFirstRedeploy starts at the log end as it was when some node first
	// restarted into a new scope (the log end, if none has): a joiner
	// whose baseline retires exactly the pre-redeploy history.
	AtFirstRedeploy
)

// JoinMode is when a node first starts.
type JoinMode uint8

const (
	// JoinAtStart: the node starts with the world.
	JoinAtStart JoinMode = iota
	// JoinAfterProducers: the node starts once every edge producer is done.
	JoinAfterProducers
	// JoinWhenQuiet: the node starts once nothing else can progress.
	JoinWhenQuiet
	// JoinAfterRestart: the node starts once some node has restarted.
	JoinAfterRestart
	// JoinWhen: the node starts once NodeSpec.JoinWhen reports true.
	JoinWhen
)

// NodeSpec describes one stage task hosted by a SimNode.
type NodeSpec struct {
	Name      string // unique in the world; also the stage name
	Partition int32  // the task's partition (sender identity)
	Inputs    []Ref
	Sinks     []string
	Logic     Logic
	// LogicAfterRestart, when set, replaces Logic once the node has
	// restarted: a sink can go quiet for good after a restart.
	LogicAfterRestart Logic
	Start             StartMode
	Join              JoinMode
	// JoinWhen is the start condition of a JoinWhen node.
	JoinWhen func(*World) bool
	// TickTopic, when set, is a topic among Sinks and (partition
	// Partition) among Inputs: the node emits Ticks stamped records to it.
	TickTopic string
	Ticks     int
	// Redeploys replace Inputs and Sinks at the given restarts.
	Redeploys []Redeploy
	// Replays makes the host restart each input from a position drawn
	// between the log start and its committed position, ignoring
	// ResumePositions: a host whose offset commits lag its store, or that
	// never asks. The protocol must drop what it already accounted for.
	Replays bool
	// ResetAt, when positive, wipes the node's store (state and changelog
	// gone) at its ResetAt-th restart; consumer positions survive. The
	// sender identity is the same, so its sequences must not restart
	// below the ones it sent before.
	ResetAt int
	// LegacyHost reports no send acknowledgements (Sent), as a host built
	// before they were reported: its restarts fall back to claiming sink
	// end offsets — trailing commit markers — as 0.2 writers do. Its own
	// stamps are exempt from the constraint-8 check; readers must still
	// settle its claims by position advance and the skipped-run fold.
	LegacyHost bool
	// CrashWeight is the node's weight when the scheduler draws a crash
	// (doubled while it holds records); 0 means 1. A family whose shape
	// needs one node's restarts raises it; a negative weight exempts the
	// node from crashes.
	CrashWeight int
}

// Redeploy is a changed scope a node restarts into at its At-th restart
// (1 = the first restart after a crash).
type Redeploy struct {
	At     int
	Inputs []Ref
	Sinks  []string
	// Logic, when set, replaces the node's logic from this redeploy on.
	Logic Logic
	// When, when set, must report true at the restart for the redeploy to
	// happen; until it does, the redeploy (and every later one) waits a
	// restart.
	When func(n *SimNode) bool
	// Force crashes the node as soon as When holds (the redeploy being
	// the next one due), outside the world's crash budget, so a family
	// whose shape needs the rescope gets it on every seed where the
	// condition arises, not only when a random crash lands after it. A
	// redeploy is forced once; if its condition no longer holds at the
	// restart it waits for the world's crashes like any other.
	Force bool
}

type nodeState uint8

const (
	notStarted nodeState = iota
	up
	down
)

// SimNode is the reference host: it hosts one Protocol exactly as a stage
// task does. Each step is one transaction: store mutations are staged in a
// protocol.Batch, consumer positions are staged, every send is stamped at
// the single site (PrepareSend with the concrete partition) and appended in
// the step's broker transaction, and the step ends in commit or — on a
// crash — abort of all three together (H3). Each append's offset goes back
// to the node (Sent) inside the step, as a produce acknowledgement does. A
// restart goes through the full init path: New over the committed store
// (restore, own outputs, rescope), Release, and
// positions from the committed ones and ResumePositions, clamped to the log
// start (H5, H6).
type SimNode struct {
	spec  NodeSpec
	w     *World
	actor int
	state nodeState

	inputs []headers.Channel // current scope, sorted
	from   map[headers.Channel]StartMode
	sinks  []string

	store *protocol.MemStore        // committed store
	pos   map[headers.Channel]int64 // committed consumer positions
	ticks int                       // ticks left
	proto Protocol                  // nil unless up
	batch *protocol.Batch           // staged store writes of the incarnation
	spos  map[headers.Channel]int64 // staged positions
	txn   int                       // open broker transaction
	gone  []headers.Channel         // inputs dropped by a redeploy, for the oracle
	folds [3]uint64                 // position folds, skipped-run folds and carried skips of dead incarnations

	restarts int
	forced   map[int]bool // redeploys (by index) whose Force crash was spent
	swept    int          // step of the incarnation's last truncation sweep; -1 = none
	logic    Logic        // set by a redeploy that replaces the logic

	// seqSeen is, per input and sender, the highest send sequence the host
	// has seen delivered (for the shared-claim statistic).
	seqSeen map[headers.Channel]map[headers.SenderID]int64
	// storeFault, when positive, makes the store fail on its storeFault-th
	// operation in the current step (see faultStore).
	storeFault int

	// The invariant checks' memory (see checkInvariants): watermarks last
	// seen and as of the last commit, one past the highest position
	// committed per channel, and whether this incarnation already failed.
	cfg               *protocol.Config // the incarnation's configuration, for checkExplain
	inv, invCommitted watermarks
	reached           map[headers.Channel]int64
	invBroken         bool
	delivered         uint64 // deliveries the incarnation returned, against Counters.Delivered
	stamped           uint64 // stamps the incarnation issued, against Counters.Stamps
	restoreChecks     int    // committed steps with records held, for checkRestore's spacing

	// What the gap families' statistics remember (gaps.go): the inputs
	// of every scope so far, the marks restored on inputs this incarnation
	// took back, the last watermarks seen, and whether the inputs' topic
	// IDs mix sign bits.
	everIn         map[headers.Channel]bool
	regrown        map[headers.Channel]map[headers.SenderID]int64
	lastStates     []protocol.InputState
	signHi, signLo bool
}

// Name returns the node's name.
func (n *SimNode) Name() string { return n.spec.Name }

// Up reports whether the node is running.
func (n *SimNode) Up() bool { return n.state == up }

// Held returns how many records the running node holds (0 when down).
func (n *SimNode) Held() int {
	if n.proto == nil {
		return 0
	}
	return n.proto.Counters().Held
}

func (n *SimNode) resolve(refs []Ref) ([]headers.Channel, error) {
	var out []headers.Channel
	for _, r := range refs {
		t := n.w.Broker.Topic(r.Topic)
		if t == nil || int(r.Partition) >= t.Partitions() {
			return nil, fmt.Errorf("sim: node %s: no topic partition %s/%d", n.spec.Name, r.Topic, r.Partition)
		}
		out = append(out, t.Channel(r.Partition))
		if n.from == nil {
			n.from = map[headers.Channel]StartMode{}
		}
		if r.From != Default {
			n.from[t.Channel(r.Partition)] = r.From
		}
	}
	slices.SortFunc(out, headers.Channel.Compare)
	return out, nil
}

// begin opens a step: a broker transaction and staged positions.
func (n *SimNode) begin() {
	n.txn = n.w.Broker.Begin()
	n.spos = make(map[headers.Channel]int64, len(n.pos))
	for k, v := range n.pos {
		n.spos[k] = v
	}
}

// commit ends a step: flush, then store, positions, sends and the oracle's
// knowledge commit together.
func (n *SimNode) commit() error {
	if err := n.proto.Flush(); err != nil {
		return err
	}
	n.checkInvariants("Flush")
	return n.commitFlushed()
}

// commitFlushed commits a step whose protocol state is flushed.
func (n *SimNode) commitFlushed() error {
	if err := n.batch.Commit(); err != nil {
		return err
	}
	n.pos = n.spos
	for ch, p := range n.pos {
		if r, ok := n.reached[ch]; !ok || p > r {
			n.reached[ch] = p
		}
	}
	n.invCommitted = n.inv.clone()
	if n.Held() > 0 {
		n.checkExplain()
		n.checkRestore()
	}
	n.w.Broker.Commit(n.txn)
	n.w.Oracle.Commit(n.actor)
	return nil
}

// abort ends a step as a crash does and takes the node down.
func (n *SimNode) abort() {
	if n.w.opts.Fault == BreakAtomicity && n.proto != nil {
		// The shirked duty: the store and positions survive a step whose
		// sends do not.
		if n.proto.Flush() == nil {
			_ = n.batch.Commit()
		}
		n.pos = n.spos
	} else if n.batch != nil {
		n.batch.Discard()
	}
	n.w.Broker.Abort(n.txn)
	n.w.Oracle.Abort(n.actor)
	n.down()
}

func (n *SimNode) down() {
	if n.proto != nil {
		c := n.proto.Counters()
		n.folds[0] += c.PositionFolds
		n.folds[1] += c.SkippedRunFolds
		n.folds[2] += c.CarriedSkipped
	}
	n.proto, n.batch, n.spos, n.txn, n.delivered, n.stamped = nil, nil, nil, 0, 0, 0
	n.state = down
	n.inv, n.invBroken = n.invCommitted.clone(), false
}

// handle processes deliveries in order: the oracle judges each, then the
// node's logic runs and its emissions are stamped and sent.
func (n *SimNode) handle(ds []protocol.Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	// The node reuses the slice on its next call that returns deliveries;
	// sends do not return deliveries, but keep the host honest anyway.
	ds = slices.Clone(ds)
	// Counters.Delivered counts the records released through the gate
	// in this incarnation: exactly those the host received.
	n.delivered += uint64(len(ds))
	if n.proto != nil && !n.invBroken {
		if c := n.proto.Counters().Delivered; c != n.delivered {
			n.invBroken = true
			n.w.Oracle.violate(Invariant, n.spec.Name, fmt.Sprintf("Counters.Delivered is %d, the incarnation delivered %d", c, n.delivered))
		}
	}
	for i := range ds {
		d := &ds[i]
		e := n.w.Broker.Entry(d.Channel, d.Offset)
		if e == nil || e.Kind != Business {
			n.w.Oracle.violate(Unknown, n.spec.Name, "delivered "+d.Coordinate.String()+", which holds no committed record")
			continue
		}
		if !bytes.Equal(d.Key, e.Key) || !bytes.Equal(d.Value, e.Value) || d.Timestamp != e.Timestamp || !sameHeaders(d.Headers, e.Headers) ||
			(d.Key == nil) != (e.Key == nil) || (d.Value == nil) != (e.Value == nil) {
			// V10 in the simulator: what reaches user logic at a
			// coordinate is the record fetched there, byte for byte.
			n.w.Oracle.violate(Payload, n.spec.Name, fmt.Sprintf("%v delivered with key %#v value %#v timestamp %d headers %s, fetched as key %#v value %#v timestamp %d headers %s",
				d.Coordinate, d.Key, d.Value, d.Timestamp, headerShape(d.Headers), e.Key, e.Value, e.Timestamp, headerShape(e.Headers)))
		}
		var st headers.Stamp
		if err := headers.ReadStamp(&st, e.Headers); err != nil {
			n.w.Oracle.violate(FailOpen, n.spec.Name, fmt.Sprintf("%v delivered although its stamp does not decode: %v", d.Coordinate, err))
		}
		n.w.trace("deliver %s %v", n.spec.Name, d.Coordinate)
		n.w.Oracle.Deliver(n.actor, d.Coordinate)
		n.w.stats.Deliveries++
		n.noteSkipMarkClaims(d)
		n.noteDelivered(d)
		if n.w.recreatedIDs[d.Channel.Topic] {
			n.w.stats.RecreatedReads++
		}
		logic := n.spec.Logic
		if n.restarts > 0 && n.spec.LogicAfterRestart != nil {
			logic = n.spec.LogicAfterRestart
		}
		if n.logic != nil {
			logic = n.logic
		}
		for _, em := range logic(n.w.rng, d) {
			if err := n.send(em); err != nil {
				return err
			}
		}
	}
	return nil
}

// send partitions, stamps and appends one emission (H4).
func (n *SimNode) send(em Emission) error {
	t := n.w.Broker.Topic(em.Topic)
	if t == nil {
		return fmt.Errorf("sim: node %s sends to missing topic %q", n.spec.Name, em.Topic)
	}
	p := em.Partition
	if p < 0 {
		p = int32(n.w.rng.IntN(t.Partitions()))
	}
	ch := t.Channel(p)
	if n.w.recreatedIDs[t.ID] {
		n.w.stats.RecreatedWrites++
	}
	st, err := n.proto.PrepareSend(ch)
	if err != nil {
		return err
	}
	// Counters.Stamps counts the stamps PrepareSend issued in this
	// incarnation: exactly those the host received.
	n.stamped++
	if c := n.proto.Counters().Stamps; c != n.stamped && !n.invBroken {
		n.invBroken = true
		n.w.Oracle.violate(Invariant, n.spec.Name, fmt.Sprintf("Counters.Stamps is %d, the incarnation was issued %d stamps", c, n.stamped))
	}
	n.checkInvariants("PrepareSend")
	n.checkStamp(ch, st)
	n.noteStamp(st)
	if err := n.checkCommitted(ch, st); err != nil { // wire constraint 8 (committed.go)
		return err
	}
	// H4, checked inline: every offset claim names a really-appended offset.
	for e := range st.Clock.OffsetEntries() {
		if n.w.Broker.TopicByID(e.Channel.Topic) == nil {
			return fmt.Errorf("sim: %s stamps a claim on unknown channel %v", n.spec.Name, e.Channel)
		}
		if at, gone := n.w.deletedAt[e.Channel.Topic]; gone && n.swept > at {
			// Truncation: a topic that no longer exists is unclaimable,
			// and a sweep after its deletion drops it from the stamp.
			n.w.Oracle.violate(StaleClaim, n.spec.Name, fmt.Sprintf("stamp for %v still claims %v@%d, deleted at step %d, after a sweep at step %d", ch, e.Channel, e.Offset, at, n.swept))
		}
		if end := n.w.Broker.End(e.Channel); e.Offset < 0 || (end > 0 && e.Offset >= end) {
			return fmt.Errorf("sim: %s stamps a claim on %v@%d, never appended (end %d)", n.spec.Name, e.Channel, e.Offset, end)
		}
	}
	hs, err := headers.AppendStamp([]headers.Header(nil), st, headers.DialectVC)
	if err != nil {
		return err
	}
	id := n.w.Oracle.NewID(n.actor)
	if st.Tagged {
		n.w.Oracle.Tag(id, st.Sender, st.Seq)
	}
	off, err := n.w.Broker.Append(ch, n.txn, em.Key, em.Value, hs, id)
	if err != nil {
		return err
	}
	n.w.Oracle.Emit(n.actor, id, headers.Coordinate{Channel: ch, Offset: off})
	if n.w.opts.Fault != SkipOwnOutputSeed && !n.spec.LegacyHost {
		if err := n.proto.Sent(headers.Coordinate{Channel: ch, Offset: off}); err != nil { // the acknowledgement, before the step commits
			return err
		}
	}
	n.w.trace("send %s %v@%d", n.spec.Name, ch, off)
	n.w.stats.Sends++
	return nil
}

// feed hands one fetched record to the protocol and processes what it
// releases.
func (n *SimNode) feed(ch headers.Channel, off int64, e *Entry) error {
	rec := protocol.Record{Coordinate: headers.Coordinate{Channel: ch, Offset: off}, Timestamp: e.Timestamp,
		Key: e.Key, Value: e.Value, Headers: e.Headers}
	n.noteSharedClaims(&rec)
	before := n.proto.Counters().ReplaysSkipped
	ds, err := n.proto.OnRecord(&rec)
	if err != nil {
		return err
	}
	n.checkInvariants("OnRecord")
	c := n.proto.Counters()
	replay := c.ReplaysSkipped > before
	if replay {
		n.w.stats.ReplaysDropped++
	}
	var st headers.Stamp
	stp := &st
	if headers.ReadStamp(&st, e.Headers) != nil {
		stp = nil
	}
	held := !replay && !slices.ContainsFunc(ds, func(d protocol.Delivery) bool { return d.Coordinate == rec.Coordinate })
	n.noteFed(&rec, stp, replay, held)
	if c.Held > 0 {
		n.w.stats.held = true
		n.w.stats.SignedHeld = n.w.stats.SignedHeld || n.signHi
		n.w.stats.LowSignHeld = n.w.stats.LowSignHeld || n.signLo
		if len(n.inputs) > 16 {
			n.w.stats.WideHeld = true
		}
		if n.spec.Partition > 0 {
			n.w.stats.HeldAboveZero = true
		}
	}
	return n.handle(ds)
}

// fetchable reports whether a read_committed fetch on ch returns a record.
func (n *SimNode) fetchable(ch headers.Channel) bool {
	_, _, ok := n.w.Broker.Next(ch, n.pos[ch])
	return ok
}

// advanceable reports whether ch's position can move past offsets that
// never arrive as records.
func (n *SimNode) advanceable(ch headers.Channel) bool {
	p := n.pos[ch]
	_, _, ok := n.w.Broker.Next(ch, p)
	return !ok && n.w.Broker.StableEnd(ch) > p
}

// fetch is one fetch step body on ch: a poll of one to five records, then
// sometimes the position past any markers that follow.
func (n *SimNode) fetch(ch headers.Channel) error {
	b := n.w.Broker
	k := 1 + n.w.rng.IntN(5)
	if n.w.opts.Fault == FeedOutOfOrder {
		e1, o1, ok1 := b.Next(ch, n.spos[ch])
		if ok1 {
			if e2, o2, ok2 := b.Next(ch, o1+1); ok2 {
				n.w.trace("fetch-swapped %s %v@%d,%d", n.spec.Name, ch, o2, o1)
				n.spos[ch] = o2 + 1
				if err := n.feed(ch, o2, e2); err != nil {
					return err
				}
				if err := n.feed(ch, o1, e1); err != nil && !errors.Is(err, protocol.ErrOutOfOrderFeed) {
					return err
				}
				return nil
			}
		}
	}
	// A poll returns records of several partitions: after the first, each
	// record comes from any input with one to fetch (a third of the time),
	// so holds, cascades and new holds mix within one step.
	if b.StableEnd(ch) < b.End(ch) {
		n.w.stats.FetchOpenTxn++
	}
	cur := ch
	for i := range k {
		if i > 0 && n.w.rng.IntN(3) == 0 {
			var more []headers.Channel
			for _, c := range n.inputs {
				if _, _, ok := b.Next(c, n.spos[c]); ok {
					more = append(more, c)
				}
			}
			if len(more) > 0 {
				cur = more[n.w.rng.IntN(len(more))]
			}
		}
		e, off, ok := b.Next(cur, n.spos[cur])
		if !ok {
			break
		}
		n.w.trace("fetch %s %v@%d", n.spec.Name, cur, off)
		n.spos[cur] = off + 1
		if err := n.feed(cur, off, e); err != nil {
			return err
		}
	}
	if n.w.rng.IntN(2) == 0 {
		for _, c := range n.inputs {
			p := n.spos[c]
			if _, _, ok := b.Next(c, p); !ok && b.StableEnd(c) > p {
				if err := n.advance(c); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// advance moves ch's position to the last stable offset and reports it
// (H2), unless the host fault withholds it.
func (n *SimNode) advance(ch headers.Channel) error {
	p := n.w.Broker.StableEnd(ch)
	n.spos[ch] = p
	n.w.trace("position %s %v→%d", n.spec.Name, ch, p)
	if n.w.opts.Fault == WithholdPositionAdvance {
		return nil
	}
	n.w.stats.PositionAdvances++
	if n.w.opts.Fault == AdvanceAhead {
		p++
	}
	ds, err := n.positionAdvance(n.proto, ch, p)
	if err != nil {
		return err
	}
	n.checkInvariants("PositionAdvance")
	return n.handle(ds)
}

// tick emits one stamped record to the node's own tick partition.
func (n *SimNode) tick() error {
	n.ticks--
	n.w.stats.Ticks++
	return n.send(Emission{Topic: n.spec.TickTopic, Partition: n.spec.Partition, Value: []byte{0}})
}

// start builds the protocol from committed state (H5) in a step of its own
// and resolves positions.
func (n *SimNode) start(ctx context.Context) error {
	first := n.state == notStarted
	if !first {
		n.restarts++
		n.w.stats.Restarts++
	}
	prevInputs, prevSinks := n.inputs, n.sinks
	var rd *Redeploy
	for i := range n.spec.Redeploys {
		if !first && n.spec.Redeploys[i].At == n.restarts {
			rd = &n.spec.Redeploys[i]
		}
	}
	if rd != nil && rd.When != nil && !rd.When(n) {
		for i := range n.spec.Redeploys {
			if n.spec.Redeploys[i].At >= rd.At {
				n.spec.Redeploys[i].At++
			}
		}
		rd = nil
	}
	redeploy := rd != nil
	if first {
		// A node names topics: it consumes the incarnation live when it
		// first starts, a recreated one included.
		ins, err := n.resolve(n.spec.Inputs)
		if err != nil {
			return err
		}
		n.inputs = ins
	}
	if redeploy {
		ins, err := n.resolve(rd.Inputs)
		if err != nil {
			return err
		}
		n.inputs, n.sinks = ins, rd.Sinks
		if rd.Logic != nil {
			n.logic = rd.Logic
		}
	}
	if !first && n.spec.ResetAt == n.restarts {
		// The store and its changelog are gone: the node starts from
		// nothing but its consumer positions. What it delivered no longer
		// shapes its outputs, so the oracle forgets its past too.
		n.store = protocol.NewMemStore()
		n.inv, n.invCommitted = newWatermarks(), newWatermarks()
		n.w.Oracle.ForgetPast(n.actor)
		n.w.stats.StateResets++
		n.w.trace("state-reset %s", n.spec.Name)
	}
	cfg := protocol.Config{ApplicationID: "sim", Stage: n.spec.Name, Partition: n.spec.Partition,
		Inputs: n.inputs, Store: nil, Offsets: n.w.Broker}
	for _, s := range n.sinks {
		t := n.w.Broker.Topic(s)
		if t == nil {
			return fmt.Errorf("sim: node %s: no sink topic %q", n.spec.Name, s)
		}
		cfg.Sinks = append(cfg.Sinks, t.ID)
	}
	if n.w.opts.Fault == SkipOwnOutputSeed {
		cfg.Offsets = emptyEnds{n.w.Broker}
	}
	n.batch = protocol.NewBatch(n.store)
	cfg.Store = faultStore{n.batch, n}
	n.cfg = &cfg
	p, err := n.w.opts.NewProtocol(ctx, cfg)
	if redeploy && errors.Is(err, protocol.ErrHeldOnRemovedInput) {
		// Fail closed, correctly: records are held on an input the new
		// scope drops. The operator redeclares it; the redeploy waits
		// for a later restart.
		n.w.stats.RedeploysRefused++
		n.w.trace("redeploy-refused %s", n.spec.Name)
		for i := range n.spec.Redeploys {
			if n.spec.Redeploys[i].At >= rd.At {
				n.spec.Redeploys[i].At++ // this one and every later one wait a restart
			}
		}
		n.inputs, n.sinks = prevInputs, prevSinks
		n.restarts--
		n.w.stats.Restarts--
		return n.start(ctx)
	}
	if err != nil {
		n.batch = nil
		return err
	}
	if redeploy {
		if n.w.stats.Redeploys == 0 {
			n.w.snapshotEnds()
		}
		n.w.stats.Redeploys++
		for _, ch := range prevInputs {
			if !slices.Contains(n.inputs, ch) {
				n.gone = append(n.gone, ch)
			}
		}
	}
	n.proto = p
	n.state = up
	n.swept = -1
	n.lastStates = nil
	n.signHi, n.signLo = signMix(n.inputs)
	n.noteRegrown(prevInputs)
	for _, t := range cfg.Sinks {
		if n.w.openTxnOn(t) {
			n.w.stats.InitOpenTxn++ // the own-output seed meets an open transaction
			break
		}
	}
	for _, ch := range n.gone {
		n.inv.forget(ch)
		n.invCommitted.forget(ch)
		delete(n.reached, ch)
	}
	n.checkInvariants("New")
	if h := p.Counters().Held; h > 0 {
		n.w.stats.RestoredHeld++
	}
	n.begin()
	// Scope changes reach the oracle and the positions.
	for _, ch := range n.gone {
		n.w.Oracle.Unconsume(n.actor, ch)
		delete(n.spos, ch)
	}
	n.gone = nil
	var grown map[headers.Channel]int64
	if redeploy {
		grown = n.rescopeOracle(prevInputs, prevSinks)
	}
	resume := p.ResumePositions()
	for _, ch := range n.inputs {
		pos, ok := n.spos[ch]
		if !ok {
			mode := n.spec.Start
			if m, has := n.from[ch]; has {
				mode = m
			}
			switch mode {
			case Default, Earliest:
				pos = n.w.Broker.LogStart(ch)
			case Latest:
				pos = n.w.Broker.End(ch)
			case LastStable:
				pos = n.w.Broker.StableEnd(ch)
			case AtFirstRedeploy:
				pos = n.w.Broker.End(ch)
				if e, ok := n.w.redeployEnds[ch]; ok {
					pos = e
				}
			}
		}
		// The oracle's bound starts at what committed steps fetched, the
		// highest position committed while ch stayed in scope.
		from := max(pos, n.reached[ch])
		if n.spec.Replays && !first {
			// The lagging host: anywhere from the log start up to the
			// committed position, and ResumePositions unasked.
			ls := n.w.Broker.LogStart(ch)
			if pos > ls {
				pos = ls + n.w.rng.Int64N(pos-ls+1)
			}
		} else {
			for _, r := range resume {
				if r.Channel == ch && r.Offset > pos {
					pos = r.Offset
				}
			}
		}
		if ls := n.w.Broker.LogStart(ch); pos < ls && n.w.opts.Fault != IgnoreLogStart {
			pos = ls // H6: a position below the log start resets to it
		}
		n.spos[ch] = pos
		// The oracle's baseline does not trust ResumePositions: it is the
		// start position only as far as the oracle's own bound allows.
		base := n.checkResume(ch, from, pos, resume)
		if b, ok := grown[ch]; ok {
			// A grown input's carried history is skipped, never owed,
			// and the node accounts for it: a host that starts below it
			// (a Replays host) refetches only replays.
			base = max(base, b+1)
			n.reached[ch] = max(n.reached[ch], n.accountedEnd(ch, from))
		}
		n.w.Oracle.Consume(n.actor, ch, base)
	}
	ds, err := p.Release()
	if err != nil {
		return err
	}
	if len(ds) > 0 {
		n.w.stats.Released++
	}
	n.checkInvariants("Release")
	if err := n.handle(ds); err != nil {
		return err
	}
	// H2 at start: the consumer's starting position is a position like any
	// other. Everything below it was fetched in committed steps, deleted
	// by retention, or lies below the baseline, and a new incarnation
	// does not remember positions an earlier one was told. Without this, a
	// claim on a trailing marker below a committed position, or on an
	// offset below the log start, waits forever.
	if n.w.opts.Fault != WithholdPositionAdvance {
		for _, ch := range n.inputs {
			// Position 0 too: it is legal ("0 = none"), a host starting
			// on an empty log reports it, and it must be accepted as a
			// no-op rather than refused.
			if pos := n.spos[ch]; pos >= 0 {
				ds, err := n.positionAdvance(p, ch, pos)
				if err != nil {
					return err
				}
				n.checkInvariants("PositionAdvance")
				if err := n.handle(ds); err != nil {
					return err
				}
			}
		}
	}
	return n.commit()
}

// rescopeOracle tells the oracle what a redeploy retired and grew: own
// sends to dropped sinks become carried history, and each new input gets
// its re-entry bound.
func (n *SimNode) rescopeOracle(prevInputs []headers.Channel, prevSinks []string) map[headers.Channel]int64 {
	o, b := n.w.Oracle, n.w.Broker
	var former []headers.TopicID
	for _, s := range prevSinks {
		if slices.Contains(n.sinks, s) {
			continue
		}
		if t := b.Topic(s); t != nil {
			former = append(former, t.ID)
			for p := range t.Partitions() {
				o.RetireSink(n.actor, t.Channel(int32(p)))
			}
		}
	}
	grown := map[headers.Channel]int64{}
	for _, ch := range n.inputs {
		if slices.Contains(prevInputs, ch) {
			continue
		}
		bound, ok := o.Grow(n.actor, ch)
		if ok {
			grown[ch] = bound
		}
		if !ok || bound < b.LogStart(ch) {
			continue // nothing carried there by offset that a fetch could return
		}
		if slices.Contains(former, ch.Topic) {
			n.w.stats.GrewIntoFormerSink++
		} else {
			n.w.stats.GrewIntoCarried++
		}
	}
	for _, ch := range n.inputs {
		if !slices.Contains(prevInputs, ch) && o.SeqCarried(n.actor, ch, b.LogStart(ch)) > 0 {
			n.w.stats.GrewSeqCarried++
		}
	}
	return grown
}

// emptyEnds is the SkipOwnOutputSeed fault: every sink looks empty.
type emptyEnds struct{ *Broker }

func (e emptyEnds) EndOffsets(ctx context.Context, t headers.TopicID) ([]int64, bool, error) {
	ends, ok, err := e.Broker.EndOffsets(ctx, t)
	clear(ends)
	return ends, ok, err
}

// sameHeaders reports whether a and b are the same headers byte for byte,
// a nil slice or value told apart from an empty one.
func sameHeaders(a, b []headers.Header) bool {
	if len(a) != len(b) || (a == nil) != (b == nil) {
		return false
	}
	for i := range a {
		if a[i].Key != b[i].Key || !bytes.Equal(a[i].Value, b[i].Value) || (a[i].Value == nil) != (b[i].Value == nil) {
			return false
		}
	}
	return true
}

// headerShape describes headers for a payload violation: each name, and
// its value's length, nil told apart.
func headerShape(hs []headers.Header) string {
	if hs == nil {
		return "nil"
	}
	var b strings.Builder
	b.WriteString("[")
	for i, h := range hs {
		if i > 0 {
			b.WriteString(" ")
		}
		if h.Value == nil {
			fmt.Fprintf(&b, "%q:nil", h.Key)
		} else {
			fmt.Fprintf(&b, "%q:%d", h.Key, len(h.Value))
		}
	}
	b.WriteString("]")
	return b.String()
}
