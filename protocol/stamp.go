package protocol

import (
	"context"
	"slices"

	"github.com/parsley-go/parsley/headers"
)

// PrepareSend returns the stamp for one record the host is about to send to
// dest, a concrete partition of a declared sink (host duty H4: partition
// first, then stamp, then send exactly what was stamped, in this step's
// transaction). It is PrepareSendInto with a new Stamp.
func (n *Node) PrepareSend(dest headers.Channel) (*headers.Stamp, error) {
	s := new(headers.Stamp)
	if err := n.PrepareSendInto(s, dest); err != nil {
		return nil, err
	}
	return s, nil
}

// PrepareSendInto writes into s, reusing its storage, the stamp for one
// record to dest, and issues the record's send sequence on dest.
//
// The stamp is frontier ∪ advertised clocks ∪ carried ancestry ∪ own
// outputs ∪ this node's sequence claims on the other sink channels it sent
// to in this incarnation, tagged with the node's sender and the new
// sequence. Sequence claims are normalised: a claim another sender made,
// which this node has already resolved by delivery, is dropped (the
// frontier claims its offset); a claim this node made in an earlier
// incarnation, or on a channel that is no longer its sink, is dropped (own
// outputs and carried ancestry claim those sends by offset); and a claim by
// this node on dest itself is dropped (same-channel order is FIFO).
//
// An undeclared sink topic is refused with ErrUndeclaredSink and nothing
// changes.
func (n *Node) PrepareSendInto(s *headers.Stamp, dest headers.Channel) error {
	const op = "PrepareSend"
	if err := n.check(op); err != nil {
		return err
	}
	if !n.sinkSet[dest.Topic] || dest.Partition < 0 {
		return chanErr(op, dest, ErrUndeclaredSink)
	}
	s.Reset()
	c := &s.Clock
	if !n.sabotage.has(sabSkipCarried) {
		c.CopyFrom(&n.agg)
	} else {
		c.CopyFrom(&n.own)
		for _, in := range n.inputs {
			c.Merge(&in.cc)
		}
	}
	// Each input is claimed at its highest delivered record, not its
	// frontier: a claim covers every cause at or below it, markers and
	// aborted records are never causes, and a frontier folded past them
	// names an offset no committed record occupies (wire constraint 8).
	for _, in := range n.inputs {
		if in.claim >= 0 {
			c.SetOffset(in.ch, in.claim)
		}
	}
	for i, ch := range n.sent {
		if ch != dest {
			c.SetSeq(ch, n.sender, n.sentSeq[i])
		}
	}
	if c.NumSeqs() > 0 {
		c.RetainSeqs(func(e headers.SeqEntry) bool { return n.keepSeq(e, dest) })
	}
	i, found := searchChannel(n.sent, dest)
	var last int64
	if found {
		last = n.sentSeq[i]
	} else if v, ok := n.sq[dest]; ok {
		last = v
	} else {
		// No sequence stored: the sender's state may have been reset, but
		// its identity was not. Every earlier send to dest took an offset
		// below dest's end at init, and sequences never outrun offsets,
		// so starting there keeps every new sequence above every old one.
		last = n.sqSeed[dest] - 1
	}
	seq := last + 1
	n.sq[dest] = seq
	if found {
		n.sentSeq[i] = seq
	} else {
		n.sent = slices.Insert(n.sent, i, dest)
		n.sentSeq = slices.Insert(n.sentSeq, i, seq)
	}
	if !slices.Contains(n.sqDirty, dest) {
		n.sqDirty = append(n.sqDirty, dest)
	}
	s.Tagged, s.Sender, s.Seq = true, n.sender, seq
	n.counters.Stamps++
	return nil
}

// keepSeq reports whether a sequence claim stays in a stamp for dest.
func (n *Node) keepSeq(e headers.SeqEntry, dest headers.Channel) bool {
	if e.Sender == n.sender {
		if e.Channel == dest || !n.sinkSet[e.Channel.Topic] {
			return false
		}
		init, ok := n.sqInit[e.Channel]
		return !ok || e.Seq > init
	}
	if in, ok := n.byChan[e.Channel]; ok {
		if m, ok := in.ds[e.Sender]; ok && m.seq >= e.Seq {
			return false // resolved: the frontier claims m.offset ≥ the claimed record
		}
	}
	return true
}

// Bound is the stability bound of one topic for Truncate: the broker's log
// start per partition (indexed by partition), or Gone when the topic no
// longer exists.
type Bound struct {
	Topic     headers.TopicID
	LogStarts []int64
	Gone      bool
}

// Truncate drops from carried ancestry and the advertised clocks every
// offset entry below its channel's log start (at or below the stability
// bound logStart-1), and every entry of a topic that is gone. Records below
// the log start are below every present or future consumer's baseline, and
// a gone topic's claims can never be consumed, so no gate can need these
// entries. The frontier and own outputs are bounded by the node's own
// channels and stay. Bounds for topics the clocks do not name are ignored.
func (n *Node) Truncate(bounds []Bound) error {
	if err := n.check("Truncate"); err != nil {
		return err
	}
	byTopic := make(map[headers.TopicID]*Bound, len(bounds))
	for i := range bounds {
		byTopic[bounds[i].Topic] = &bounds[i]
	}
	keepOff := func(e headers.OffsetEntry) bool {
		b, ok := byTopic[e.Channel.Topic]
		if !ok {
			return true
		}
		if b.Gone {
			return false
		}
		p := int(e.Channel.Partition)
		return p >= len(b.LogStarts) || e.Offset >= b.LogStarts[p]
	}
	keepSeq := func(e headers.SeqEntry) bool {
		b, ok := byTopic[e.Channel.Topic]
		return !ok || !b.Gone
	}
	trunc := func(c *headers.Clock) bool {
		no, ns := c.NumOffsets(), c.NumSeqs()
		c.RetainOffsets(keepOff)
		c.RetainSeqs(keepSeq)
		return c.NumOffsets() != no || c.NumSeqs() != ns
	}
	if trunc(&n.carried) {
		n.caDirty = true
	}
	for _, in := range n.inputs {
		if trunc(&in.cc) {
			in.ccDirty = true
		}
	}
	n.rebuildAgg()
	return nil
}

// StampTopics returns the topics named by the stamp-side clocks (carried
// ancestry and the advertised clocks), sorted: the topics whose log starts
// a truncation sweep needs.
func (n *Node) StampTopics() []headers.TopicID {
	var ts []headers.TopicID
	add := func(c *headers.Clock) {
		for e := range c.OffsetEntries() {
			ts = append(ts, e.Channel.Topic)
		}
		for e := range c.SeqEntries() {
			ts = append(ts, e.Channel.Topic)
		}
	}
	add(&n.carried)
	for _, in := range n.inputs {
		add(&in.cc)
	}
	slices.SortFunc(ts, headers.TopicID.Compare)
	return slices.Compact(ts)
}

// TruncateToLogStarts is one truncation sweep: it asks the node's
// BrokerOffsets for the log starts of StampTopics and truncates to them. A
// failed query returns the error and truncates nothing; the node stays
// usable, and the next sweep tries again.
func (n *Node) TruncateToLogStarts(ctx context.Context) error {
	const op = "TruncateToLogStarts"
	if err := n.check(op); err != nil {
		return err
	}
	var bounds []Bound
	for _, t := range n.StampTopics() {
		starts, exists, err := n.offsets.LogStarts(ctx, t)
		if err != nil {
			return &Error{Op: op, Topic: t, Err: err}
		}
		bounds = append(bounds, Bound{Topic: t, LogStarts: starts, Gone: !exists})
	}
	return n.Truncate(bounds)
}
