package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Following a changelog partition: the one place that turns the records of
// read_committed reads into a task's state. A restore, a standby (Tailer)
// and a view all follow the changelog through a Follower, into a Sink: the
// task's store (StoreSink) or a view's replica.
//
// A Follower applies a record only once its transaction's commit marker is
// read, and applies the records of several producers' transactions only at
// an offset where none of them is still undecided. read_committed already
// hides aborted records and stops at the last stable offset, but a read may
// end inside a transaction (its records fill more than one fetch), and a
// transaction's records may interleave with another producer's: a sink
// that took a read's records as they came would hold part of a step — its
// protocol state, say, without its fold state — and a view would answer a
// token read from it.

// ErrBadMarker: a changelog control record whose key is not a transaction
// marker's (an abort or a commit), so the follower cannot tell whether its
// transaction committed. It fails the read rather than guess.
var ErrBadMarker = errors.New("state: changelog control record is no transaction marker")

// A Record is one changelog record of a read_committed read.
type Record struct {
	Offset int64
	// Key is the store key; Value the value, nil for a delete (a
	// tombstone).
	Key, Value []byte
	// Producer is the producer ID of a record written in a transaction,
	// -1 for one written outside any.
	Producer int64
	// Control marks a transaction marker of Producer's transaction, which
	// Commit says it committed (or else aborted).
	Control, Commit bool
}

// RecordOf returns the Record of a fetched franz-go record; a control
// record must be a transaction marker (ErrBadMarker otherwise).
func RecordOf(r *kgo.Record) (Record, error) {
	out := Record{Offset: r.Offset, Key: r.Key, Value: r.Value, Producer: -1, Control: r.Attrs.IsControl()}
	if r.Attrs.IsTransactional() || out.Control {
		out.Producer = r.ProducerID
	}
	if out.Control {
		var k kmsg.ControlRecordKey
		if err := k.ReadFrom(r.Key); err != nil {
			return out, fmt.Errorf("%w: %s[%d] offset %d: %v", ErrBadMarker, r.Topic, r.Partition, r.Offset, err)
		}
		switch k.Type {
		case kmsg.ControlRecordKeyTypeCommit:
			out.Commit = true
		case kmsg.ControlRecordKeyTypeAbort:
		default:
			return out, fmt.Errorf("%w: %s[%d] offset %d has control type %d", ErrBadMarker, r.Topic, r.Partition, r.Offset, k.Type)
		}
		out.Key, out.Value = nil, nil
	}
	return out, nil
}

// A Sink takes a changelog partition's committed transactions from a
// Follower: the writes of whole transactions, one by one in changelog
// order, and at the end of each read the offset they reach.
type Sink interface {
	// Put applies m, or stages it for the next Commit. The Follower puts
	// only the writes of committed transactions, and all of a
	// transaction's before anything past it; a key may come more than
	// once, and its last write wins. m.Value aliases the read's record.
	Put(m protocol.Mutation)
	// Commit records that every committed record below next is reflected
	// by the writes put so far, and applies those it staged. If it fails,
	// the sink keeps what it staged, and the Follower commits again at its
	// next read.
	Commit(ctx context.Context, next int64) error
}

// StoreSink returns the Sink that applies into st: the writes of each read
// in one SQLite transaction whose checkpoint is the read's offset, keeping
// the checkpoint time.
func StoreSink(st *Store) Sink { return &storeSink{st: st, idx: make(map[string]int)} }

// storeSink stages a read's writes, the last per key, for one Store.Apply.
type storeSink struct {
	st   *Store
	muts []protocol.Mutation
	idx  map[string]int // key → its write in muts
}

func (s *storeSink) Put(m protocol.Mutation) {
	if i, ok := s.idx[m.Key]; ok {
		s.muts[i] = m
		return
	}
	s.idx[m.Key] = len(s.muts)
	s.muts = append(s.muts, m)
}

func (s *storeSink) Commit(ctx context.Context, next int64) error {
	// The zero time keeps the recorded one, which holds for every record
	// past a later checkpoint too.
	if err := s.st.Apply(ctx, s.muts, next, time.Time{}); err != nil {
		return err
	}
	s.muts = reuse(s.muts)
	clear(s.idx)
	return nil
}

// A Follower applies one changelog partition's committed transactions to a
// Sink at their commit markers (see above). It is not safe for concurrent
// use.
type Follower struct {
	sink    Sink
	read    int64 // where the next read starts
	applied int64 // every committed record below it is in the sink

	// pending are the data records read since the last boundary (an
	// offset at which no transaction the follower read a record of was
	// undecided), in offset order; open the producers among them whose
	// marker is not read yet, with the offset of their transaction's first
	// record. doneAt is the last boundary: the sink has every write below
	// it, committed up to applied.
	pending []Record
	open    map[int64]int64
	doneAt  int64

	// Commit markers read, those below doneAt, and those applied; data
	// records put and applied.
	commits, doneCommits, txns int64
	put, records               int64
}

// keepScratch is how many records or writes a follower's buffers may keep
// room for between reads: a larger read's buffers go with it.
const keepScratch = 1 << 14

// NewFollower returns a follower of a partition whose records below from
// sink holds already, reading from from.
func NewFollower(sink Sink, from int64) *Follower {
	return &Follower{sink: sink, read: from, applied: from, doneAt: from, open: make(map[int64]int64)}
}

// Position is where the next read starts: the offset past the last record
// read (the follower may hold records below it that wait for a marker).
func (f *Follower) Position() int64 { return f.read }

// Applied is the offset below which the sink holds every committed record:
// a transaction boundary, never inside a transaction.
func (f *Follower) Applied() int64 { return f.applied }

// Holding reports whether the follower holds records that wait for their
// transaction's marker.
func (f *Follower) Holding() bool { return len(f.pending) > 0 }

// Applies returns how many data records, and how many transactions'
// commits, the follower applied so far.
func (f *Follower) Applies() (records, txns int64) { return f.records, f.txns }

// Rewind drops the records the follower holds and reads from Applied
// again: the client that read them is gone. Writes it put past Applied
// are put again, in order, which leaves the sink as it would be.
func (f *Follower) Rewind() {
	f.pending = reuse(f.pending)
	clear(f.open)
	f.read, f.doneAt = f.applied, f.applied
	f.commits, f.doneCommits, f.put = f.txns, f.txns, f.records
}

// Read takes the records of one read_committed read from Position (Add
// each), then applies what they completed (Flush).
func (f *Follower) Read(ctx context.Context, recs []Record, next int64) error {
	for i := range recs {
		f.Add(&recs[i])
	}
	return f.Flush(ctx, next)
}

// Add takes the next record of a read_committed read from Position, in
// offset order; a record below Position (read again) is skipped. The
// transactions it completes go to the sink (Put), to be committed by
// Flush once the read is taken.
func (f *Follower) Add(r *Record) {
	if r.Offset < f.read {
		return
	}
	f.read = r.Offset + 1
	switch {
	case !r.Control:
		f.pending = append(f.pending, *r)
		if _, ok := f.open[r.Producer]; !ok && r.Producer >= 0 {
			f.open[r.Producer] = r.Offset
		}
	case r.Commit:
		f.commits++
		delete(f.open, r.Producer)
	default:
		// read_committed leaves an aborted transaction's records out;
		// should any have come, they go with their marker.
		if from, ok := f.open[r.Producer]; ok {
			f.dropAborted(r.Producer, from)
		}
		delete(f.open, r.Producer)
	}
	if len(f.open) == 0 {
		f.complete()
	}
}

// complete puts pending, in which no transaction is undecided, to the
// sink: the read is at a boundary.
func (f *Follower) complete() {
	for i := range f.pending {
		r := &f.pending[i]
		f.sink.Put(protocol.Mutation{Key: string(r.Key), Value: r.Value, Delete: r.Value == nil})
	}
	f.put += int64(len(f.pending))
	f.pending = reuse(f.pending)
	f.doneAt, f.doneCommits = f.read, f.commits
}

// Flush commits to the sink what the records added since the last Flush
// completed: every transaction below the last offset at which no
// transaction the follower read a record of is undecided. next is the
// offset past what the read covered, markers and the aborted records it
// left out included. A sink error is returned as it is, and the next Flush
// commits again.
func (f *Follower) Flush(ctx context.Context, next int64) error {
	if next > f.read {
		// The read passed offsets it returned no record for (aborted
		// records left out): nothing undecided can start among them.
		f.read = next
		if len(f.open) == 0 {
			f.doneAt = next
		}
	}
	if f.doneAt <= f.applied {
		return nil
	}
	if err := f.sink.Commit(ctx, f.doneAt); err != nil {
		return err
	}
	f.records, f.txns, f.applied = f.put, f.doneCommits, f.doneAt
	return nil
}

// dropAborted drops the pending records of producer pid's transaction that
// began at offset from; its earlier, committed transactions' records stay.
func (f *Follower) dropAborted(pid, from int64) {
	keep := f.pending[:0]
	for _, r := range f.pending {
		if r.Producer != pid || r.Offset < from {
			keep = append(keep, r)
		}
	}
	clear(f.pending[len(keep):])
	f.pending = keep
}

// reuse empties b for the next read, keeping its room unless it grew past
// keepScratch, and lets go of what its elements point to.
func reuse[E any](b []E) []E {
	if cap(b) > keepScratch {
		return nil
	}
	clear(b)
	return b[:0]
}
