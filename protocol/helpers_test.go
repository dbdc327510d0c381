package protocol

import (
	"context"
	"errors"
	"testing"

	"github.com/parsley-go/parsley/headers"
)

// fakeOffsets is a BrokerOffsets over fixed answers.
type fakeOffsets struct {
	ends   map[headers.TopicID][]int64
	starts map[headers.TopicID][]int64
	gone   map[headers.TopicID]bool
	err    error
	calls  int
}

func newOffsets() *fakeOffsets {
	return &fakeOffsets{ends: map[headers.TopicID][]int64{}, starts: map[headers.TopicID][]int64{}, gone: map[headers.TopicID]bool{}}
}

func (f *fakeOffsets) EndOffsets(_ context.Context, t headers.TopicID) ([]int64, bool, error) {
	f.calls++
	if f.err != nil {
		return nil, false, f.err
	}
	if f.gone[t] {
		return nil, false, nil
	}
	e, ok := f.ends[t]
	if !ok {
		return []int64{0}, true, nil // an existing, empty, one-partition topic
	}
	return e, true, nil
}

func (f *fakeOffsets) LogStarts(_ context.Context, t headers.TopicID) ([]int64, bool, error) {
	f.calls++
	if f.err != nil {
		return nil, false, f.err
	}
	if f.gone[t] {
		return nil, false, nil
	}
	return f.starts[t], true, nil
}

func tid(b byte) headers.TopicID {
	var t headers.TopicID
	t[0], t[15] = 0x10, b
	return t
}

func chn(b byte, p int32) headers.Channel { return headers.Channel{Topic: tid(b), Partition: p} }

// stampOf builds a stamp from offset and sequence claims.
type st struct {
	offs   []headers.OffsetEntry
	seqs   []headers.SeqEntry
	sender *headers.SenderID
	seq    int64
}

func off(ch headers.Channel, o int64) headers.OffsetEntry {
	return headers.OffsetEntry{Channel: ch, Offset: o}
}

func sq(ch headers.Channel, s headers.SenderID, n int64) headers.SeqEntry {
	return headers.SeqEntry{Channel: ch, Sender: s, Seq: n}
}

func (s st) headers(t testing.TB) []headers.Header {
	if t != nil {
		t.Helper()
	}
	var stamp headers.Stamp
	for _, e := range s.offs {
		stamp.Clock.SetOffset(e.Channel, e.Offset)
	}
	for _, e := range s.seqs {
		stamp.Clock.SetSeq(e.Channel, e.Sender, e.Seq)
	}
	if s.sender != nil {
		stamp.Tagged, stamp.Sender, stamp.Seq = true, *s.sender, s.seq
	}
	hs, err := headers.AppendStamp([]headers.Header(nil), &stamp, headers.DialectVC)
	if err != nil {
		panic(err)
	}
	return hs
}

func rec(t testing.TB, ch headers.Channel, o int64, s st) *Record {
	t.Helper()
	return &Record{Coordinate: headers.Coordinate{Channel: ch, Offset: o}, Timestamp: 1000 + o, Value: []byte("v"), Headers: s.headers(t)}
}

// plain is an unstamped record.
func plain(ch headers.Channel, o int64) *Record {
	return &Record{Coordinate: headers.Coordinate{Channel: ch, Offset: o}, Timestamp: 1000 + o}
}

type env struct {
	t     testing.TB
	store *MemStore
	offs  *fakeOffsets
	cfg   Config
	walk  bool        // force the merge-walk form of the gate
	sab   sabotageSet // switches, in parsley_sabotage builds
}

func newEnv(t testing.TB, inputs []headers.Channel, sinks []headers.TopicID) *env {
	e := &env{t: t, store: NewMemStore(), offs: newOffsets()}
	e.cfg = Config{ApplicationID: "app", Stage: "stage", Partition: 0, Inputs: inputs, Sinks: sinks, Store: e.store, Offsets: e.offs}
	return e
}

func (e *env) node() *Node {
	e.t.Helper()
	n, err := newNode(context.Background(), e.cfg, e.sab)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	if e.walk {
		n.gateLookup = false
	}
	if ds, err := n.Release(); err != nil || len(ds) != 0 {
		e.t.Fatalf("Release after New: %v %v", coords(ds), err)
	}
	return n
}

// coords lists the coordinates of ds.
func coords(ds []Delivery) []headers.Coordinate {
	var out []headers.Coordinate
	for _, d := range ds {
		out = append(out, d.Coordinate)
	}
	return out
}

func at(ch headers.Channel, o int64) headers.Coordinate {
	return headers.Coordinate{Channel: ch, Offset: o}
}

func feed(t testing.TB, n *Node, r *Record) []headers.Coordinate {
	t.Helper()
	ds, err := n.OnRecord(r)
	if err != nil {
		t.Fatalf("OnRecord %v: %v", r.Coordinate, err)
	}
	return coords(ds)
}

func advance(t testing.TB, n *Node, ch headers.Channel, pos int64) []headers.Coordinate {
	t.Helper()
	ds, err := n.PositionAdvance(ch, pos)
	if err != nil {
		t.Fatalf("PositionAdvance %v %d: %v", ch, pos, err)
	}
	return coords(ds)
}

func flush(t testing.TB, n *Node) {
	t.Helper()
	if err := n.Flush(); err != nil {
		t.Fatalf("Flush: %v", err)
	}
}

func eqCoords(a, b []headers.Coordinate) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func wantCoords(t testing.TB, what string, got []headers.Coordinate, want ...headers.Coordinate) {
	t.Helper()
	if !eqCoords(got, want) {
		t.Fatalf("%s: delivered %v, want %v", what, got, want)
	}
}

func wantErr(t testing.TB, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want one wrapping %v", err, target)
	}
	var pe *Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v is not a *protocol.Error", err)
	}
}

func prepare(t testing.TB, n *Node, dest headers.Channel) *headers.Stamp {
	t.Helper()
	s, err := n.PrepareSend(dest)
	if err != nil {
		t.Fatalf("PrepareSend %v: %v", dest, err)
	}
	return s
}

// asRecord turns a stamp into the record a node would have sent.
func asRecord(t testing.TB, s *headers.Stamp, ch headers.Channel, o int64) *Record {
	t.Helper()
	hs, err := headers.AppendStamp([]headers.Header{{Key: "app", Value: []byte("x")}}, s, headers.DialectVC)
	if err != nil {
		t.Fatal(err)
	}
	return &Record{Coordinate: at(ch, o), Timestamp: 7, Key: []byte("k"), Value: []byte("v"), Headers: hs}
}
