package sim

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/parsley-go/parsley/headers"
)

// EntryKind is what occupies one offset of a simulated partition.
type EntryKind uint8

const (
	// Business is a committed record a read_committed fetch returns.
	Business EntryKind = iota + 1
	// Pending is a record of a transaction still open: it sits above the
	// last stable offset and blocks read_committed fetches.
	Pending
	// Aborted is a record of an aborted transaction: it keeps its offset
	// and is never returned.
	Aborted
	// CommitMarker and AbortMarker are transaction control records.
	CommitMarker
	AbortMarker
)

func (k EntryKind) String() string {
	switch k {
	case Business:
		return "business"
	case Pending:
		return "pending"
	case Aborted:
		return "aborted"
	case CommitMarker:
		return "commit-marker"
	case AbortMarker:
		return "abort-marker"
	}
	return fmt.Sprintf("EntryKind(%d)", uint8(k))
}

// Entry is one offset of a partition's log.
type Entry struct {
	Kind      EntryKind
	Key       []byte
	Value     []byte
	Headers   []headers.Header
	Timestamp int64
	ID        int // the oracle's record id; -1 for markers
	txn       int
}

type partitionLog struct {
	log      []Entry
	logStart int64
}

// Topic is one incarnation of a topic: a name, a topic ID that no later
// incarnation reuses, and its partitions.
type Topic struct {
	Name    string
	ID      headers.TopicID
	parts   []*partitionLog
	deleted bool
}

// Partitions returns the topic's partition count.
func (t *Topic) Partitions() int { return len(t.parts) }

// Channel returns partition p of t.
func (t *Topic) Channel(p int32) headers.Channel { return headers.Channel{Topic: t.ID, Partition: p} }

// Broker is the simulated Kafka cluster: partitions with real offset
// occupancy, where business records, transaction markers and aborted
// records all take offsets and a read_committed fetch returns only business
// records. It implements protocol.BrokerOffsets.
//
// Transactions are opened with Begin, written with Append, and closed with
// Commit or Abort, which write a marker to every partition the transaction
// touched. Records of an open transaction are Pending: they bound the last
// stable offset, so no fetch passes them until the transaction closes.
type Broker struct {
	topics  []*Topic // every incarnation, in creation order
	byName  map[string]*Topic
	byID    map[headers.TopicID]*Topic
	nextTxn int
	txns    map[int][]headers.Channel // open transaction → partitions touched, in first-touch order
	clock   int64                     // logical timestamp, one tick per append
	// IDSalt, when non-zero, draws topic IDs from it (see topicID); set it
	// before creating topics. Zero gives small IDs in creation order.
	IDSalt uint64
	// Protect is consulted before retention deletes history: it returns
	// the lowest offset an active subscriber of ch has not yet fetched.
	Protect func(ch headers.Channel) (int64, bool)
}

// NewBroker returns an empty broker.
func NewBroker() *Broker {
	return &Broker{byName: map[string]*Topic{}, byID: map[headers.TopicID]*Topic{}, txns: map[int][]headers.Channel{}}
}

// CreateTopic creates (or, after DeleteTopic, recreates under a new topic
// ID) the named topic with the given partition count. A live topic of the
// name is returned unchanged.
func (b *Broker) CreateTopic(name string, partitions int) *Topic {
	if t := b.byName[name]; t != nil && !t.deleted {
		return t // already live: creating it again is a no-op
	}
	id := b.topicID(len(b.topics) + 1)
	t := &Topic{Name: name, ID: id}
	for range partitions {
		t.parts = append(t.parts, &partitionLog{})
	}
	b.topics = append(b.topics, t)
	b.byName[name] = t
	b.byID[id] = t
	return t
}

// topicID returns the ID of the n-th topic incarnation. With IDSalt zero
// IDs are small and sort in creation order. Otherwise each half is drawn
// from the salt, so about half the topics have the sign bit of the high
// half set and topics created in pairs share the high half and differ in
// the low one, sign bit included: Java's signed UUID order (the order of a
// clock's entries and of a gate's inputs) then differs from byte order and
// from creation order, and so does every comparison that gets the sign
// wrong.
func (b *Broker) topicID(n int) headers.TopicID {
	var id headers.TopicID
	if b.IDSalt == 0 {
		id[0], id[1], id[2], id[15] = 0x5a, byte(n>>8), byte(n), 0x01
		return id
	}
	hi := splitmix(b.IDSalt ^ uint64((n+1)/2))
	lo := splitmix(hi ^ uint64(n))
	if lo == 0 {
		lo = 1 // the zero ID is reserved
	}
	binary.BigEndian.PutUint64(id[:8], hi)
	binary.BigEndian.PutUint64(id[8:], lo)
	for b.byID[id] != nil {
		lo++ // a collision of 64-bit draws: keep IDs unique
		binary.BigEndian.PutUint64(id[8:], lo)
	}
	return id
}

// splitmix is the SplitMix64 finaliser: a bijective mix of x.
func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// DeleteTopic deletes the named topic: its ID then names nothing, and a
// later CreateTopic of the same name is a different channel.
func (b *Broker) DeleteTopic(name string) {
	if t := b.byName[name]; t != nil {
		t.deleted = true
	}
}

// Topic returns the live incarnation of the named topic, or nil.
func (b *Broker) Topic(name string) *Topic {
	if t := b.byName[name]; t != nil && !t.deleted {
		return t
	}
	return nil
}

// TopicByID returns the incarnation with the given ID, deleted or not.
func (b *Broker) TopicByID(id headers.TopicID) *Topic { return b.byID[id] }

func (b *Broker) part(ch headers.Channel) *partitionLog {
	t := b.byID[ch.Topic]
	if t == nil || t.deleted || ch.Partition < 0 || int(ch.Partition) >= len(t.parts) {
		return nil
	}
	return t.parts[ch.Partition]
}

// Begin opens a transaction and returns its handle.
func (b *Broker) Begin() int {
	b.nextTxn++
	b.txns[b.nextTxn] = nil
	return b.nextTxn
}

// Append appends a record to ch and returns its offset. With txn 0 the
// record is committed at once (a non-transactional producer); otherwise it
// is Pending until txn closes.
func (b *Broker) Append(ch headers.Channel, txn int, key, value []byte, hs []headers.Header, id int) (int64, error) {
	p := b.part(ch)
	if p == nil {
		return 0, fmt.Errorf("sim: append to %v: no such channel", ch)
	}
	kind := Business
	if txn != 0 {
		touched, ok := b.txns[txn]
		if !ok {
			return 0, fmt.Errorf("sim: append to %v: transaction %d is not open", ch, txn)
		}
		kind = Pending
		if !containsChan(touched, ch) {
			b.txns[txn] = append(touched, ch)
		}
	}
	b.clock++
	p.log = append(p.log, Entry{Kind: kind, Key: key, Value: value, Headers: hs, Timestamp: b.clock, ID: id, txn: txn})
	return int64(len(p.log) - 1), nil
}

func containsChan(s []headers.Channel, c headers.Channel) bool {
	for _, x := range s {
		if x == c {
			return true
		}
	}
	return false
}

// Commit closes txn: its records become business records and every
// partition it touched gets a commit marker.
func (b *Broker) Commit(txn int) { b.close(txn, Business, CommitMarker) }

// Abort closes txn: its records become aborted records and every partition
// it touched gets an abort marker.
func (b *Broker) Abort(txn int) { b.close(txn, Aborted, AbortMarker) }

func (b *Broker) close(txn int, to, marker EntryKind) {
	touched, ok := b.txns[txn]
	if !ok {
		return
	}
	delete(b.txns, txn)
	for _, ch := range touched {
		p := b.part(ch)
		if p == nil {
			continue
		}
		for i := range p.log {
			if p.log[i].Kind == Pending && p.log[i].txn == txn {
				p.log[i].Kind = to
			}
		}
		b.clock++
		p.log = append(p.log, Entry{Kind: marker, Timestamp: b.clock, ID: -1, txn: txn})
	}
}

// End returns the log end offset (high watermark) of ch.
func (b *Broker) End(ch headers.Channel) int64 {
	if p := b.part(ch); p != nil {
		return int64(len(p.log))
	}
	return 0
}

// LogStart returns the earliest offset ch still holds.
func (b *Broker) LogStart(ch headers.Channel) int64 {
	if p := b.part(ch); p != nil {
		return p.logStart
	}
	return 0
}

// StableEnd returns the last stable offset of ch: the first offset of an
// open transaction, or the log end.
func (b *Broker) StableEnd(ch headers.Channel) int64 {
	p := b.part(ch)
	if p == nil {
		return 0
	}
	for i := p.logStart; i < int64(len(p.log)); i++ {
		if p.log[i].Kind == Pending {
			return i
		}
	}
	return int64(len(p.log))
}

// Next returns the first business record a read_committed consumer at
// position pos would fetch on ch, and its offset; ok is false when there
// is none below the last stable offset. A position below the log start
// reads from the log start.
func (b *Broker) Next(ch headers.Channel, pos int64) (e *Entry, off int64, ok bool) {
	p := b.part(ch)
	if p == nil {
		return nil, 0, false
	}
	for i := max(pos, p.logStart); i < int64(len(p.log)); i++ {
		switch p.log[i].Kind {
		case Pending:
			return nil, 0, false
		case Business:
			return &p.log[i], i, true
		}
	}
	return nil, 0, false
}

// Entry returns the entry at ch@off, or nil when it is outside the log.
func (b *Broker) Entry(ch headers.Channel, off int64) *Entry {
	p := b.part(ch)
	if p == nil || off < 0 || off >= int64(len(p.log)) {
		return nil
	}
	return &p.log[off]
}

// AdvanceLogStart deletes ch's history below to, as retention does, but
// never past what an active subscriber has not fetched (Protect) nor past
// the last stable offset. It returns the new log start.
func (b *Broker) AdvanceLogStart(ch headers.Channel, to int64) int64 {
	p := b.part(ch)
	if p == nil {
		return 0
	}
	to = min(to, b.StableEnd(ch))
	if b.Protect != nil {
		if lim, ok := b.Protect(ch); ok {
			to = min(to, lim)
		}
	}
	if to > p.logStart {
		p.logStart = to
	}
	return p.logStart
}

// EndOffsets implements protocol.BrokerOffsets.
func (b *Broker) EndOffsets(_ context.Context, topic headers.TopicID) ([]int64, bool, error) {
	t := b.byID[topic]
	if t == nil || t.deleted {
		return nil, false, nil
	}
	out := make([]int64, len(t.parts))
	for i, p := range t.parts {
		out[i] = int64(len(p.log))
	}
	return out, true, nil
}

// LogStarts implements protocol.BrokerOffsets.
func (b *Broker) LogStarts(_ context.Context, topic headers.TopicID) ([]int64, bool, error) {
	t := b.byID[topic]
	if t == nil || t.deleted {
		return nil, false, nil
	}
	out := make([]int64, len(t.parts))
	for i, p := range t.parts {
		out[i] = p.logStart
	}
	return out, true, nil
}
