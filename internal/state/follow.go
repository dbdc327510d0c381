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
// Follower.
type Sink interface {
	// Apply applies muts, the writes of whole committed transactions in
	// changelog order (a key may come more than once; its last write
	// wins), and records that every committed record below next is now
	// reflected. muts may be empty: next moved over markers alone. The
	// Follower reuses muts' backing array after Apply returns; the keys
	// are the sink's, the values alias the read's records.
	Apply(ctx context.Context, muts []protocol.Mutation, next int64) error
}

// StoreSink returns the Sink that applies into st: each Apply is one SQLite
// transaction whose checkpoint is next, keeping the checkpoint time.
func StoreSink(st *Store) Sink { return storeSink{st} }

type storeSink struct{ st *Store }

func (s storeSink) Apply(ctx context.Context, muts []protocol.Mutation, next int64) error {
	// The zero time keeps the recorded one, which holds for every record
	// past a later checkpoint too.
	return s.st.Apply(ctx, lastPerKey(muts), next, time.Time{})
}

// A Follower applies one changelog partition's committed transactions to a
// Sink at their commit markers (see above). It is not safe for concurrent
// use.
type Follower struct {
	sink    Sink
	read    int64 // where the next read starts
	applied int64 // every committed record below it is in the sink

	// pending are the data records read and not applied, in offset
	// order; open the producers among them whose marker is not read yet,
	// with the offset of their transaction's first record. pending[:done]
	// are complete: no transaction runs past them, and doneAt is the
	// offset past their last marker.
	pending []Record
	open    map[int64]int64
	done    int
	doneAt  int64

	// Commit markers read, those up to doneAt, and those applied; data
	// records applied.
	commits, doneCommits, txns int64
	records                    int64
	muts                       []protocol.Mutation
}

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

// Holding reports whether the follower holds records read and not applied.
func (f *Follower) Holding() bool { return len(f.pending) > 0 }

// Applies returns how many data records, and how many transactions'
// commits, the follower applied so far.
func (f *Follower) Applies() (records, txns int64) { return f.records, f.txns }

// Rewind drops what the follower holds unapplied and reads from Applied
// again: the client that read it is gone.
func (f *Follower) Rewind() {
	clear(f.pending)
	f.pending = f.pending[:0]
	clear(f.open)
	f.read, f.done, f.doneAt = f.applied, 0, f.applied
	f.commits, f.doneCommits = f.txns, f.txns
}

// Read takes the records of one read_committed read from Position, in
// offset order (records below Position are skipped: a read again), and
// next, the offset past what the read covered, markers and the aborted
// records it left out included. It applies to the sink, in one Apply, the
// transactions the read completed, up to the last offset at which no
// transaction it has read a record of is undecided. A sink error is
// returned as it is, and the follower then holds what it held before.
func (f *Follower) Read(ctx context.Context, recs []Record, next int64) error {
	for i := range recs {
		r := &recs[i]
		if r.Offset < f.read {
			continue
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
			f.done, f.doneAt, f.doneCommits = len(f.pending), f.read, f.commits
		}
	}
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
	return f.flush(ctx)
}

// dropAborted drops the pending records of producer pid's transaction that
// began at offset from, which all stand past pending[:done] (it was
// undecided); its earlier, committed transactions' records stay.
func (f *Follower) dropAborted(pid, from int64) {
	keep := f.pending[:f.done]
	for _, r := range f.pending[f.done:] {
		if r.Producer != pid || r.Offset < from {
			keep = append(keep, r)
		}
	}
	clear(f.pending[len(keep):])
	f.pending = keep
}

// flush applies pending[:done] with doneAt.
func (f *Follower) flush(ctx context.Context) error {
	muts := f.muts[:0]
	for _, r := range f.pending[:f.done] {
		muts = append(muts, protocol.Mutation{Key: string(r.Key), Value: r.Value, Delete: r.Value == nil})
	}
	err := f.sink.Apply(ctx, muts, f.doneAt)
	clear(muts)
	f.muts = muts[:0]
	if err != nil {
		return err
	}
	f.records += int64(f.done)
	f.txns = f.doneCommits
	f.applied = f.doneAt
	n := copy(f.pending, f.pending[f.done:])
	clear(f.pending[n:])
	f.pending = f.pending[:n]
	f.done = 0
	return nil
}
