package hostsim

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"
	"unsafe"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TP is one partition of one topic.
type TP struct {
	Topic     string
	Partition int32
}

func (tp TP) String() string { return fmt.Sprintf("%s[%d]", tp.Topic, tp.Partition) }

func compareTP(x, y TP) int {
	return cmp.Or(cmp.Compare(x.Topic, y.Topic), cmp.Compare(x.Partition, y.Partition))
}

// Cluster is a model of one Kafka cluster as a stage host sees it:
// partition logs with transactions (read_committed reads stop at the last
// stable offset and skip aborted records; commit and abort markers take an
// offset), transactional producers fenced by epoch, and one consumer group
// with the classic protocol's generations, cooperative rebalancing and
// static membership, whose committed offsets ride transactions (KIP-447:
// a pending commit holds a stable offset fetch back). Its methods run on
// whichever actor or driver calls them; the scheduler runs one at a time.
type Cluster struct {
	s         *Sched
	topics    map[string]*topicLog
	producers map[string]*Producer // by transactional ID
	nextPID   int64
	group     *Group

	// TxnTimeout is how long a transaction may stay open before the
	// cluster aborts it and fences its producer (Tick).
	TxnTimeout time.Duration
	// SessionTimeout is how long a member may go without a heartbeat
	// before the coordinator removes it; RebalanceTimeout how long a join
	// round waits for members to rejoin.
	SessionTimeout, RebalanceTimeout time.Duration

	// OnCommit, when set, sees every transaction that commits, before its
	// effects are visible.
	OnCommit func(t *Txn)
	// OnTouch, when set, sees a transaction write to a partition, or
	// commit an offset of one, for the first time: the judge checks that
	// no two open transactions work on one task.
	OnTouch func(t *Txn, tp TP, offset bool)
}

type topicLog struct {
	id    [16]byte
	parts [][]*entry
}

type entry struct {
	offset  int64
	key     []byte
	value   []byte
	headers []kgo.RecordHeader
	ts      time.Time
	txn     *Txn // nil: written outside a transaction
	marker  bool // a commit or abort marker
}

// NewCluster returns an empty cluster on s's clock.
func NewCluster(s *Sched) *Cluster {
	return &Cluster{
		s: s, topics: make(map[string]*topicLog), producers: make(map[string]*Producer),
		TxnTimeout: time.Minute, SessionTimeout: 10 * time.Second, RebalanceTimeout: 10 * time.Second,
	}
}

// CreateTopic adds a topic of n partitions.
func (c *Cluster) CreateTopic(name string, n int32) {
	t := &topicLog{parts: make([][]*entry, n)}
	t.id[0] = byte(len(c.topics) + 1)
	copy(t.id[1:], name)
	c.topics[name] = t
}

// TopicID returns a topic's ID.
func (c *Cluster) TopicID(name string) [16]byte { return c.topics[name].id }

// Partitions returns a topic's partition count, 0 when it does not exist.
func (c *Cluster) Partitions(name string) int32 {
	if t := c.topics[name]; t != nil {
		return int32(len(t.parts))
	}
	return 0
}

// Topics returns the topic names, sorted.
func (c *Cluster) Topics() []string { return slices.Sorted(maps.Keys(c.topics)) }

func (c *Cluster) log(tp TP) []*entry { return c.topics[tp.Topic].parts[tp.Partition] }

// Bounds returns a partition's last stable offset, high watermark and log
// start.
func (c *Cluster) Bounds(tp TP) (lso, hwm, start int64) {
	l := c.log(tp)
	hwm = int64(len(l))
	lso = hwm
	for _, e := range l {
		if e.txn != nil && !e.marker && e.txn.State == TxnOpen {
			lso = e.offset
			break
		}
	}
	return lso, hwm, 0
}

// Rec is a record read back.
type Rec struct {
	Offset  int64
	Key     []byte
	Value   []byte
	Headers []kgo.RecordHeader
	// Producer is the producer ID of a record written in a transaction
	// (a marker's too), -1 for one written outside any.
	Producer int64
	// Control marks a transaction marker; Commit a commit marker.
	Control, Commit bool
}

// ReadCommitted reads tp from pos as a read_committed consumer does: up to
// max records (data and markers) below the last stable offset, skipping
// aborted ones. next is the offset past the last one read or skipped.
func (c *Cluster) ReadCommitted(tp TP, pos int64, max int) (recs []Rec, next int64) {
	lso, _, _ := c.Bounds(tp)
	l := c.log(tp)
	next = pos
	for next < lso && len(recs) < max {
		e := l[next]
		next++
		pid := int64(-1)
		if e.txn != nil {
			pid = e.txn.p.pid
		}
		switch {
		case e.marker:
			recs = append(recs, Rec{Offset: e.offset, Producer: pid, Control: true, Commit: e.txn.State == TxnCommitted})
		case e.txn != nil && e.txn.State == TxnAborted:
		default:
			recs = append(recs, Rec{Offset: e.offset, Key: e.key, Value: e.value, Headers: e.headers, Producer: pid})
		}
	}
	return recs, next
}

// Committed returns every committed data record of tp, in offset order.
func (c *Cluster) Committed(tp TP) []Rec {
	var out []Rec
	for _, e := range c.log(tp) {
		if !e.marker && (e.txn == nil || e.txn.State == TxnCommitted) {
			out = append(out, Rec{Offset: e.offset, Key: e.key, Value: e.value, Headers: e.headers})
		}
	}
	return out
}

// Append writes a record outside any transaction and returns its offset.
func (c *Cluster) Append(tp TP, key, value []byte) int64 {
	return c.append(tp, &entry{key: key, value: value, ts: c.s.now})
}

func (c *Cluster) append(tp TP, e *entry) int64 {
	t := c.topics[tp.Topic]
	e.offset = int64(len(t.parts[tp.Partition]))
	t.parts[tp.Partition] = append(t.parts[tp.Partition], e)
	return e.offset
}

// TxnState is a transaction's state.
type TxnState int

// The states of a transaction.
const (
	TxnOpen TxnState = iota
	TxnCommitted
	TxnAborted
)

// Producer is a transactional ID's producer: its epoch, and its open
// transaction.
type Producer struct {
	ID    string
	pid   int64
	Epoch int16
	Open  *Txn
}

// Txn is one transaction.
type Txn struct {
	p       *Producer
	epoch   int16
	State   TxnState
	Started time.Time
	Wrote   map[TP]int // records written per partition
	// Offsets are the group offsets the transaction commits, pending
	// until it ends; Meta names their committer (fence.go's metadata).
	Offsets map[TP]int64
	Meta    string
	// Member and Gen are who committed the offsets, and in which group
	// generation the coordinator accepted them.
	Member string
	Gen    int32
}

// OpenTxns returns the open transactions, by transactional ID.
func (c *Cluster) OpenTxns() []*Txn {
	var out []*Txn
	for _, id := range slices.Sorted(maps.Keys(c.producers)) {
		if t := c.producers[id].Open; t != nil {
			out = append(out, t)
		}
	}
	return out
}

// Producer returns the transaction's transactional ID.
func (t *Txn) Producer() string { return t.p.ID }

// ErrFenced is what a fenced producer's requests fail with.
type ErrFenced struct{ TxnID string }

func (e *ErrFenced) Error() string {
	return "hostsim: producer " + e.TxnID + " fenced: a newer incarnation or a timeout took its epoch"
}

// InitProducer initializes a transactional ID: it aborts the open
// transaction of an earlier incarnation and returns the producer at a new
// epoch, which fences every earlier one.
func (c *Cluster) InitProducer(txnID string) (pid int64, epoch int16) {
	p := c.producers[txnID]
	if p == nil {
		c.nextPID++
		p = &Producer{ID: txnID, pid: c.nextPID, Epoch: -1}
		c.producers[txnID] = p
	}
	if p.Open != nil {
		c.endTxn(p.Open, false)
	}
	p.Epoch++
	return p.pid, p.Epoch
}

// BeginTxn opens a transaction of producer txnID at epoch.
func (c *Cluster) BeginTxn(txnID string, epoch int16) (*Txn, error) {
	p := c.producers[txnID]
	if p == nil || p.Epoch != epoch {
		return nil, &ErrFenced{txnID}
	}
	if p.Open != nil {
		return nil, fmt.Errorf("hostsim: producer %s already has a transaction open", txnID)
	}
	t := &Txn{p: p, epoch: epoch, Started: c.s.now, Wrote: make(map[TP]int), Offsets: make(map[TP]int64)}
	p.Open = t
	return t, nil
}

// Produce writes a record into t.
func (c *Cluster) Produce(t *Txn, tp TP, key, value []byte, hs []kgo.RecordHeader, ts time.Time) (int64, error) {
	if err := c.live(t); err != nil {
		return -1, err
	}
	if t.Wrote[tp] == 0 && c.OnTouch != nil {
		c.OnTouch(t, tp, false)
	}
	t.Wrote[tp]++
	return c.append(tp, &entry{key: key, value: value, headers: hs, ts: ts, txn: t}), nil
}

// live fails when t's producer was fenced or t ended.
func (c *Cluster) live(t *Txn) error {
	if t.p.Epoch != t.epoch || t.State != TxnOpen {
		return &ErrFenced{t.p.ID}
	}
	return nil
}

// EndTxn ends t, committing it when commit is set.
func (c *Cluster) EndTxn(t *Txn, commit bool) error {
	if err := c.live(t); err != nil {
		return err
	}
	if commit && c.OnCommit != nil {
		c.OnCommit(t)
	}
	c.endTxn(t, commit)
	return nil
}

func (c *Cluster) endTxn(t *Txn, commit bool) {
	if commit {
		t.State = TxnCommitted
		for _, tp := range slices.SortedFunc(maps.Keys(t.Offsets), compareTP) {
			c.group.committed[tp] = Offset{At: t.Offsets[tp], Meta: t.Meta}
		}
	} else {
		t.State = TxnAborted
	}
	for _, tp := range slices.SortedFunc(maps.Keys(t.Wrote), compareTP) {
		c.append(tp, &entry{marker: true, txn: t, ts: c.s.now})
	}
	t.p.Open = nil
}

// Tick runs the cluster's timers at the clock's time: it aborts the
// transactions open past TxnTimeout (fencing their producers) and lets the
// coordinator expire members and end join rounds.
func (c *Cluster) Tick() {
	for _, id := range slices.Sorted(maps.Keys(c.producers)) {
		p := c.producers[id]
		if p.Open != nil && c.s.now.Sub(p.Open.Started) >= c.TxnTimeout {
			c.s.Note("txn of %s timed out", id)
			c.endTxn(p.Open, false)
			p.Epoch++
		}
	}
	if c.group != nil {
		c.group.tick()
	}
}

// AbortAbandoned aborts, fencing their producers, the open transactions of
// the transactional IDs whose instance (txnPrefix + instance) is no longer
// a member of the group: what a stage's fence does when it takes a
// departed owner's partitions over. It returns the IDs it aborted.
func (c *Cluster) AbortAbandoned(txnPrefix string) []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(c.producers)) {
		p := c.producers[id]
		if p.Open == nil || len(id) <= len(txnPrefix) || id[:len(txnPrefix)] != txnPrefix {
			continue
		}
		if c.group.hasInstance(id[len(txnPrefix):]) {
			continue
		}
		c.endTxn(p.Open, false)
		p.Epoch++
		out = append(out, id)
	}
	return out
}

// controlRecord is a record whose attributes mark it a control record
// (a commit or abort marker). kgo.RecordAttrs holds the record batch's
// attribute byte, unexported: bit 5 marks a control batch. The test of
// this package checks that IsControl reads it so.
func controlRecord(topic string, p int32, offset int64) *kgo.Record {
	r := &kgo.Record{Topic: topic, Partition: p, Offset: offset}
	*(*uint8)(unsafe.Pointer(&r.Attrs)) = 0b0010_0000
	return r
}
