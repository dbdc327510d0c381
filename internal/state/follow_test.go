package state

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// mapSink is a Sink over a map that a judge inspects at every Commit. It
// stages the writes put and applies them at Commit, as a store does.
type mapSink struct {
	kv      map[string]string
	staged  []protocol.Mutation
	next    int64
	commits int
	check   func(kv map[string]string, next int64)
	fail    error // the next Commit fails with it, applying nothing
}

func (s *mapSink) Put(m protocol.Mutation) { s.staged = append(s.staged, m) }

func (s *mapSink) Commit(_ context.Context, next int64) error {
	if s.fail != nil {
		err := s.fail
		s.fail = nil
		return err
	}
	for _, m := range s.staged {
		if m.Delete {
			delete(s.kv, m.Key)
		} else {
			s.kv[m.Key] = string(m.Value)
		}
	}
	s.staged = s.staged[:0]
	s.next = next
	s.commits++
	if s.check != nil {
		s.check(s.kv, next)
	}
	return nil
}

// changelogModel is a partition written by several transactional producers
// at once and by plain writes, read read_committed: a read returns records
// below the last stable offset only, and leaves aborted ones out.
type changelogModel struct {
	log  []Record
	txn  []int            // per offset: the transaction's index in state, -1 outside any
	open map[int64]int    // producer → its open transaction
	end  []transactionEnd // per transaction
	seq  int
}

type transactionEnd struct {
	producer int64
	marker   int64 // -1 while open
	commit   bool
}

func (m *changelogModel) write(r *rand.Rand, producer int64) {
	key := fmt.Sprintf("k%d", r.IntN(5))
	m.seq++
	var val []byte
	if r.IntN(5) > 0 {
		val = fmt.Appendf(nil, "v%d", m.seq)
	}
	t := -1
	if producer >= 0 {
		var ok bool
		if t, ok = m.open[producer]; !ok {
			t = len(m.end)
			m.end = append(m.end, transactionEnd{producer: producer, marker: -1})
			m.open[producer] = t
		}
	}
	m.log = append(m.log, Record{Offset: int64(len(m.log)), Key: []byte(key), Value: val, Producer: producer})
	m.txn = append(m.txn, t)
}

func (m *changelogModel) finish(producer int64, commit bool) {
	t, ok := m.open[producer]
	if !ok {
		return
	}
	delete(m.open, producer)
	m.end[t].marker, m.end[t].commit = int64(len(m.log)), commit
	m.log = append(m.log, Record{Offset: int64(len(m.log)), Producer: producer, Control: true, Commit: commit})
	m.txn = append(m.txn, t)
}

// lso is the last stable offset: the first offset of an open transaction.
func (m *changelogModel) lso() int64 {
	for o, t := range m.txn {
		if t >= 0 && m.end[t].marker < 0 {
			return int64(o)
		}
	}
	return int64(len(m.log))
}

func (m *changelogModel) aborted(o int64) bool {
	t := m.txn[o]
	return t >= 0 && m.end[t].marker >= 0 && !m.end[t].commit
}

// read returns up to n records from pos below the last stable offset, as
// read_committed does (withAborted: with the aborted records too, which
// the follower must drop itself), and the offset past what it covered.
func (m *changelogModel) read(pos int64, n int, withAborted bool) ([]Record, int64) {
	var out []Record
	lso := m.lso()
	for ; pos < lso && len(out) < n; pos++ {
		if !m.log[pos].Control && m.aborted(pos) && !withAborted {
			continue
		}
		out = append(out, m.log[pos])
	}
	return out, pos
}

// committedRecords returns the writes of the committed records below next,
// in offset order.
func (m *changelogModel) committedRecords(next int64) []protocol.Mutation {
	var out []protocol.Mutation
	for o := range next {
		if r := m.log[o]; !r.Control && !m.aborted(o) {
			out = append(out, protocol.Mutation{Key: string(r.Key), Value: r.Value, Delete: r.Value == nil})
		}
	}
	return out
}

func sameWrite(a, b protocol.Mutation) bool {
	return a.Key == b.Key && a.Delete == b.Delete && string(a.Value) == string(b.Value)
}

// putLog is a Sink that logs every write put through it to another.
type putLog struct {
	Sink
	puts *[]protocol.Mutation
}

func (p *putLog) Put(m protocol.Mutation) {
	*p.puts = append(*p.puts, m)
	p.Sink.Put(m)
}

// committedState is the replay, in offset order, of the committed records
// below next.
func (m *changelogModel) committedState(next int64) map[string]string {
	kv := map[string]string{}
	for o := range next {
		r := m.log[o]
		if r.Control || m.aborted(o) {
			continue
		}
		if r.Value == nil {
			delete(kv, string(r.Key))
		} else {
			kv[string(r.Key)] = string(r.Value)
		}
	}
	return kv
}

// TestFollowerAppliesWholeTransactions is the follower's judge: seeded
// schedules of up to three producers' transactions interleaved on one
// partition with plain writes, read in reads of every size read_committed
// allows (some ending inside a transaction), sometimes with the aborted
// records left in. After every read the writes put to the sink must be
// exactly the committed records below some offset that splits no
// transaction, in order (a view applies them as they are put); at every
// Commit the sink must hold exactly the committed records below its
// offset, replayed in order, again splitting no transaction; at the end,
// all of them.
func TestFollowerAppliesWholeTransactions(t *testing.T) {
	ctx := context.Background()
	splitSeeds, heldSeeds := 0, 0
	for seed := range uint64(400) {
		r := rand.New(rand.NewPCG(seed, 53))
		m := &changelogModel{open: map[int64]int{}}
		withAborted := seed%4 == 3
		var fail error
		sink := &mapSink{kv: map[string]string{}}
		splits := func(next int64) error {
			for o := range next {
				if t := m.txn[o]; t >= 0 && !m.aborted(o) && (m.end[t].marker < 0 || m.end[t].marker >= next) {
					return fmt.Errorf("%d splits the transaction with a record at %d (marker %d)", next, o, m.end[t].marker)
				}
			}
			return nil
		}
		sink.check = func(kv map[string]string, next int64) {
			if want := m.committedState(next); !maps.Equal(kv, want) {
				fail = fmt.Errorf("at %d the sink holds %v, want %v", next, kv, want)
			}
			if err := splits(next); err != nil {
				fail = fmt.Errorf("commit at %v", err)
			}
		}
		var puts []protocol.Mutation // every write put, in order
		put := &putLog{Sink: sink, puts: &puts}
		f := NewFollower(put, 0)
		applied := int64(0)
		for step := 0; step < 120 && fail == nil; step++ {
			switch k := r.IntN(10); {
			case k < 5:
				m.write(r, int64(r.IntN(3)))
			case k < 6:
				m.write(r, -1)
			case k < 8:
				m.finish(int64(r.IntN(3)), r.IntN(4) > 0)
			default:
				recs, next := m.read(f.Position(), 1+r.IntN(6), withAborted)
				if err := f.Read(ctx, recs, next); err != nil {
					t.Fatalf("seed %d: %v", seed, err)
				}
				if f.Applied() < applied {
					t.Fatalf("seed %d: Applied went back from %d to %d", seed, applied, f.Applied())
				}
				// The writes put so far are the committed records below
				// the last boundary, whole transactions.
				if err := splits(f.doneAt); err != nil {
					t.Fatalf("seed %d: puts up to %v", seed, err)
				}
				if want := m.committedRecords(f.doneAt); !slices.EqualFunc(puts, want, sameWrite) {
					t.Fatalf("seed %d: after reading to %d the follower put %v, want the committed records below %d, %v", seed, next, puts, f.doneAt, want)
				}
				applied = f.Applied()
				if f.Holding() {
					heldSeeds++
				}
				if f.Applied() < next && f.Holding() && len(m.open) > 0 {
					splitSeeds++
				}
			}
		}
		for p := range int64(3) {
			m.finish(p, r.IntN(2) == 0)
		}
		for f.Position() < int64(len(m.log)) && fail == nil {
			recs, next := m.read(f.Position(), 1+r.IntN(6), withAborted)
			if err := f.Read(ctx, recs, next); err != nil {
				t.Fatalf("seed %d: %v", seed, err)
			}
		}
		if fail != nil {
			t.Fatalf("seed %d: %v", seed, fail)
		}
		if f.Applied() != int64(len(m.log)) || f.Holding() {
			t.Fatalf("seed %d: at the end Applied = %d (log end %d), holding %v", seed, f.Applied(), len(m.log), f.Holding())
		}
		if want := m.committedState(int64(len(m.log))); !maps.Equal(sink.kv, want) {
			t.Fatalf("seed %d: at the end the sink holds %v, want %v", seed, sink.kv, want)
		}
		commits := 0
		for _, e := range m.end {
			if e.commit {
				commits++
			}
		}
		if _, txns := f.Applies(); txns != int64(commits) {
			t.Fatalf("seed %d: %d transactions applied, the log has %d commits", seed, txns, commits)
		}
	}
	// Anti-vacuity: the schedules do make the follower hold records past
	// a read, with other transactions open.
	if heldSeeds < 100 || splitSeeds < 50 {
		t.Fatalf("the schedules held records after %d reads, with transactions open after %d: too few to judge", heldSeeds, splitSeeds)
	}
}

// A read that ends inside a transaction — its protocol state read, its
// fold state not yet — applies nothing of it: a view would answer a token
// read from the half (the frontier says delivered, the fold state is the
// old one). Interleaved producers wait for each other's markers.
func TestFollowerWaitsForTheMarker(t *testing.T) {
	ctx := context.Background()
	sink := &mapSink{kv: map[string]string{}}
	f := NewFollower(sink, 10)
	put := func(o, pid int64, k, v string) Record {
		return Record{Offset: o, Key: []byte(k), Value: []byte(v), Producer: pid}
	}
	marker := func(o, pid int64, commit bool) Record {
		return Record{Offset: o, Producer: pid, Control: true, Commit: commit}
	}
	steps := []struct {
		recs    []Record
		next    int64
		applied int64
		want    map[string]string
	}{
		// Producer 7's step: its frontier first, in a read of its own.
		{[]Record{put(10, 7, "f/in:0", "5")}, 11, 10, map[string]string{}},
		// Producer 8 writes between; 7's fold state and marker, then 8's
		// marker: only then is no transaction undecided.
		{[]Record{put(11, 8, "\x02b", "B"), put(12, 7, "\x02a", "A5"), marker(13, 7, true)}, 14, 10, map[string]string{}},
		{[]Record{marker(14, 8, true)}, 15, 15, map[string]string{"f/in:0": "5", "\x02a": "A5", "\x02b": "B"}},
		// A read that skipped aborted records (next past them) with no
		// transaction undecided moves Applied over them.
		{nil, 18, 18, map[string]string{"f/in:0": "5", "\x02a": "A5", "\x02b": "B"}},
		// An abort marker drops what its producer wrote, had the read
		// returned it; a plain write applies at once.
		{[]Record{put(18, 9, "\x02a", "lost"), marker(19, 9, false), put(20, -1, "\x02c", "C")}, 21, 21,
			map[string]string{"f/in:0": "5", "\x02a": "A5", "\x02b": "B", "\x02c": "C"}},
		// Records read again (below Position) are skipped.
		{[]Record{put(20, -1, "\x02c", "old")}, 21, 21, map[string]string{"f/in:0": "5", "\x02a": "A5", "\x02b": "B", "\x02c": "C"}},
	}
	for i, s := range steps {
		if err := f.Read(ctx, s.recs, s.next); err != nil {
			t.Fatal(err)
		}
		if f.Applied() != s.applied || !maps.Equal(sink.kv, s.want) {
			t.Fatalf("step %d: Applied %d, sink %q; want %d, %q", i, f.Applied(), sink.kv, s.applied, s.want)
		}
	}
	if rs, txns := f.Applies(); rs != 4 || txns != 2 {
		t.Fatalf("Applies = %d records, %d transactions; want 4, 2", rs, txns)
	}
}

// A sink whose Commit fails keeps what it staged, and the follower commits
// again at its next read; Rewind drops the records held to read them
// again.
func TestFollowerSinkFailureAndRewind(t *testing.T) {
	ctx := context.Background()
	sink := &mapSink{kv: map[string]string{}}
	f := NewFollower(sink, 0)
	boom := errors.New("disk full")
	sink.fail = boom
	recs := []Record{{Offset: 0, Key: []byte("a"), Value: []byte("1"), Producer: 1}, {Offset: 1, Producer: 1, Control: true, Commit: true}}
	if err := f.Read(ctx, recs, 2); !errors.Is(err, boom) {
		t.Fatalf("Read = %v, want the sink's error", err)
	}
	if f.Applied() != 0 || len(sink.kv) != 0 {
		t.Fatalf("after a failed commit: Applied %d, sink %v", f.Applied(), sink.kv)
	}
	if err := f.Read(ctx, nil, 2); err != nil || f.Applied() != 2 || sink.kv["a"] != "1" {
		t.Fatalf("the next read: %v, Applied %d, sink %v", err, f.Applied(), sink.kv)
	}
	if err := f.Read(ctx, []Record{{Offset: 2, Key: []byte("b"), Value: []byte("2"), Producer: 1}}, 3); err != nil {
		t.Fatal(err)
	}
	f.Rewind()
	if f.Position() != 2 || f.Holding() {
		t.Fatalf("after Rewind: Position %d, holding %v; want 2, false", f.Position(), f.Holding())
	}
}

// RecordOf reads a marker's type from its key, and refuses a control record
// that is no transaction marker.
func TestRecordOf(t *testing.T) {
	ctl := func(typ kmsg.ControlRecordKeyType) *kgo.Record {
		k := kmsg.ControlRecordKey{Type: typ}
		r := &kgo.Record{Offset: 4, ProducerID: 3, Key: k.AppendTo(nil)}
		r.Attrs = kgo.NewRecordAttrs(kgo.RecordAttrsOpts{Control: true, Transactional: true})
		return r
	}
	for _, tt := range []struct {
		r      *kgo.Record
		commit bool
		bad    bool
	}{
		{ctl(kmsg.ControlRecordKeyTypeCommit), true, false},
		{ctl(kmsg.ControlRecordKeyTypeAbort), false, false},
		{ctl(kmsg.ControlRecordKeyType(9)), false, true},
		{func() *kgo.Record { r := ctl(0); r.Key = []byte{0}; return r }(), false, true},
	} {
		got, err := RecordOf(tt.r)
		if tt.bad != errors.Is(err, ErrBadMarker) {
			t.Fatalf("RecordOf(key %x) error %v, want bad %v", tt.r.Key, err, tt.bad)
		}
		if !tt.bad && (!got.Control || got.Commit != tt.commit || got.Producer != 3) {
			t.Fatalf("RecordOf(key %x) = %+v", tt.r.Key, got)
		}
	}
	plain, _ := RecordOf(&kgo.Record{Offset: 1, ProducerID: 5, Key: []byte("k")})
	if plain.Producer != -1 || plain.Control {
		t.Fatalf("a record written outside a transaction: %+v", plain)
	}
}
