package protocol

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/parsley-go/parsley/headers"
)

// TestHeldRecordRestoredVerbatim: a held record survives a restart with
// key, value, every header, timestamp and coordinate identical, nil and
// empty kept distinct for the key, the value, the header slice and each
// header value.
func TestHeldRecordRestoredVerbatim(t *testing.T) {
	s := headers.SenderID{0xaa}
	stampHs := st{offs: []headers.OffsetEntry{off(b0, 3)}, sender: &s, seq: 12}.headers(t)
	withApp := func(app ...headers.Header) []headers.Header {
		return append(app, stampHs...)
	}
	tests := []struct {
		name string
		r    Record
	}{
		{"nil key and value", Record{Key: nil, Value: nil, Headers: withApp()}},
		{"empty key and value", Record{Key: []byte{}, Value: []byte{}, Headers: withApp()}},
		{"app headers nil and empty values", Record{Key: []byte("k"), Value: []byte("v"), Headers: withApp(
			headers.Header{Key: "trace", Value: nil},
			headers.Header{Key: "trace", Value: []byte{}},
			headers.Header{Key: "", Value: []byte{0, 1, 2}},
			headers.Header{Key: "ünï", Value: []byte("x")},
		)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, []headers.Channel{a0, b0}, nil)
			n := e.node()
			r := tt.r
			r.Coordinate = at(a0, 41)
			r.Timestamp = -5 // before the epoch: opaque to the node
			feed(t, n, &r)
			flush(t, n)
			n = e.node()
			ds, err := n.OnRecord(plain(b0, 3))
			if err != nil {
				t.Fatal(err)
			}
			wantCoords(t, "restored", coords(ds), at(b0, 3), at(a0, 41))
			got := ds[1]
			if !reflect.DeepEqual(got.Record, r) {
				t.Fatalf("restored record\n got %#v\nwant %#v", got.Record, r)
			}
			for i := range r.Headers {
				if (got.Headers[i].Value == nil) != (r.Headers[i].Value == nil) {
					t.Fatalf("header %d: nil-ness changed", i)
				}
			}
			if (got.Key == nil) != (r.Key == nil) || (got.Value == nil) != (r.Value == nil) {
				t.Fatal("key or value nil-ness changed")
			}
			if !got.Stamp.Tagged || got.Stamp.Sender != s || got.Stamp.Seq != 12 {
				t.Fatalf("restored stamp tag %+v", got.Stamp)
			}
		})
	}
}

func TestNilAndEmptyHeaderSlicesStayDistinct(t *testing.T) {
	for _, hs := range [][]headers.Header{nil, {}} {
		e := newEnv(t, []headers.Channel{a0, b0}, nil)
		n := e.node()
		feed(t, n, rec(t, a0, 0, st{offs: []headers.OffsetEntry{off(b0, 0)}}))
		feed(t, n, &Record{Coordinate: at(a0, 1), Headers: hs})
		flush(t, n)
		n = e.node()
		ds, err := n.OnRecord(plain(b0, 0))
		if err != nil || len(ds) != 3 {
			t.Fatalf("%v %v", coords(ds), err)
		}
		if (ds[2].Headers == nil) != (hs == nil) {
			t.Fatalf("headers %#v restored as %#v", hs, ds[2].Headers)
		}
	}
}

func TestWithoutFlushNothingPersists(t *testing.T) {
	e := newEnv(t, []headers.Channel{a0, b0}, nil)
	n := e.node()
	feed(t, n, rec(t, a0, 0, st{offs: []headers.OffsetEntry{off(b0, 7)}}))
	feed(t, n, plain(b0, 5)) // delivered; a@0 stays held on b@7
	before := e.store.Entries()
	n = e.node() // a restart without Flush: the step never committed
	if c := n.Counters(); c.Held != 0 {
		t.Fatalf("restored %d held records that were never flushed", c.Held)
	}
	if !reflect.DeepEqual(before, e.store.Entries()) {
		t.Fatal("New without prior flush changed the store")
	}
}

func TestRestartRestoresEveryPersistedFact(t *testing.T) {
	S := chn(31, 0)
	e := newEnv(t, []headers.Channel{a0, b0}, []headers.TopicID{S.Topic})
	n := e.node()
	s := headers.SenderID{9}
	feed(t, n, rec(t, a0, 3, st{offs: []headers.OffsetEntry{off(x0, 50)}, sender: &s, seq: 7}))
	feed(t, n, rec(t, b0, 0, st{offs: []headers.OffsetEntry{off(a0, 10)}}))
	feed(t, n, rec(t, b0, 1, st{offs: []headers.OffsetEntry{off(a0, 11)}}))
	feed(t, n, rec(t, b0, 2, st{seqs: []headers.SeqEntry{sq(a0, s, 8)}}))
	prepare(t, n, S)
	flush(t, n)
	before := prepare(t, n, S)
	flush(t, n)

	m := e.node()
	after := prepare(t, m, S)
	if after.Seq != before.Seq+1 {
		t.Fatalf("send sequence %d after restart, want %d", after.Seq, before.Seq+1)
	}
	before.Seq = after.Seq
	if !before.Clock.Equal(&after.Clock) {
		t.Fatalf("stamp changed across restart:\n%v\n%v", before.Clock.AppendOffsetEntries(nil), after.Clock.AppendOffsetEntries(nil))
	}
	if c := m.Counters(); c.Held != 3 {
		t.Fatalf("held %d, want 3", c.Held)
	}
	// The delivered-sequence mark for s on a survived: seq 8 resolves b@2.
	wantCoords(t, "a@11", feed(t, m, rec(t, a0, 11, st{sender: &s, seq: 8})), at(a0, 11), at(b0, 0), at(b0, 1), at(b0, 2))
}

func TestInitIsIdempotent(t *testing.T) {
	S, F := chn(31, 0), chn(33, 0)
	e := newEnv(t, []headers.Channel{a0, b0}, []headers.TopicID{S.Topic, F.Topic})
	e.offs.ends[F.Topic] = []int64{12}
	n := e.node()
	feed(t, n, rec(t, a0, 0, st{offs: []headers.OffsetEntry{off(b0, 4)}}))
	feed(t, n, rec(t, b0, 1, st{offs: []headers.OffsetEntry{off(x0, 4)}}))
	flush(t, n)
	// Rescope: drop input b and former sink F, add input c.
	e.cfg.Inputs = []headers.Channel{a0, c0}
	e.cfg.Sinks = []headers.TopicID{S.Topic}
	committed := e.store.Clone()
	b1 := NewBatch(committed)
	e.cfg.Store = b1
	if _, err := New(context.Background(), e.cfg); err != nil {
		t.Fatal(err)
	}
	first := b1.Mutations()
	if len(first) == 0 {
		t.Fatal("rescope wrote nothing")
	}
	// A crash before commit: init runs again on the same committed state.
	b2 := NewBatch(committed)
	e.cfg.Store = b2
	if _, err := New(context.Background(), e.cfg); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, b2.Mutations()) {
		t.Fatalf("init not idempotent:\n%v\n%v", first, b2.Mutations())
	}
	// And once committed, a further init writes nothing new.
	if err := b2.Commit(); err != nil {
		t.Fatal(err)
	}
	b3 := NewBatch(committed)
	e.cfg.Store = b3
	if _, err := New(context.Background(), e.cfg); err != nil {
		t.Fatal(err)
	}
	if m := b3.Mutations(); len(m) != 0 {
		t.Fatalf("init after a committed init wrote %v", m)
	}
}

func TestShrinkFoldsDepartingChannelIntoCarriedAncestry(t *testing.T) {
	S := chn(31, 0)
	e := newEnv(t, []headers.Channel{a0, b0}, []headers.TopicID{S.Topic})
	n := e.node()
	feed(t, n, rec(t, b0, 6, st{offs: []headers.OffsetEntry{off(x0, 40)}}))
	flush(t, n)
	e.cfg.Inputs = []headers.Channel{a0}
	m := e.node()
	s := prepare(t, m, S)
	if o, ok := s.Clock.Offset(b0); !ok || o != 6 {
		t.Fatalf("departed frontier not carried: %d %v", o, ok)
	}
	if o, ok := s.Clock.Offset(x0); !ok || o != 40 {
		t.Fatalf("departed advertised clock not carried: %d %v", o, ok)
	}
	for _, k := range []string{pfxFront + chanKey(b0), pfxCC + chanKey(b0), metaKey(chanKey(b0))} {
		if _, ok, _ := e.store.Get(k); ok {
			t.Errorf("key %s of the departed channel survives", k)
		}
	}
}

func TestGrowthSeedsAtCarriedKnowledgeAndResumes(t *testing.T) {
	e := newEnv(t, []headers.Channel{a0, b0}, nil)
	n := e.node()
	feed(t, n, plain(b0, 0))
	feed(t, n, plain(b0, 9))
	feed(t, n, plain(a0, 2))
	flush(t, n)
	e.cfg.Inputs = []headers.Channel{a0} // b leaves: its frontier 9 is carried
	flush(t, e.node())
	e.cfg.Inputs = []headers.Channel{a0, b0} // b returns
	m := e.node()
	want := []Position{{a0, 3}, {b0, 10}}
	if got := m.ResumePositions(); !reflect.DeepEqual(got, want) {
		t.Fatalf("ResumePositions = %v, want %v", got, want)
	}
	wantCoords(t, "replay of carried b@5", feed(t, m, plain(b0, 5)))
	wantCoords(t, "b@10", feed(t, m, plain(b0, 10)), at(b0, 10))
}

func TestFormerSinkFoldsOwnSendsAndGoneTopicIsSkipped(t *testing.T) {
	S, F, F1, G := chn(31, 0), chn(33, 0), chn(33, 1), chn(34, 0)
	e := newEnv(t, nil, []headers.TopicID{S.Topic, F.Topic, G.Topic})
	e.offs.ends[F.Topic] = []int64{5, 8}
	n := e.node()
	for _, c := range []headers.Coordinate{at(F, 6), at(F1, 7), at(G, 0)} {
		prepare(t, n, c.Channel)
		if err := n.Sent(c); err != nil {
			t.Fatal(err)
		}
	}
	flush(t, n)
	e.cfg.Sinks = []headers.TopicID{S.Topic}
	e.offs.ends[F.Topic] = []int64{12, 9} // others wrote after: markers, not our sends
	e.offs.gone[G.Topic] = true
	m := e.node()
	s := prepare(t, m, S)
	if o, ok := s.Clock.Offset(F); !ok || o != 6 {
		t.Fatalf("former sink F/0 claim = %d %v, want the acknowledged send 6", o, ok)
	}
	if o, ok := s.Clock.Offset(F1); !ok || o != 7 {
		t.Fatalf("former sink F/1 claim = %d %v, want the acknowledged send 7", o, ok)
	}
	for e := range s.Clock.OffsetEntries() {
		if e.Channel.Topic == G.Topic {
			t.Fatalf("gone former sink claimed: %v", e)
		}
	}
}

// TestEchoedSelfSequenceClaimOnDroppedSink: the node's own sequence claim on
// a sink it later drops comes back to it in a received clock. After the
// restart its stamps claim that sink by offset (the former-sink fold), never
// by the stale sequence, which no receiver could resolve from a sender that
// will never write there again.
func TestEchoedSelfSequenceClaimOnDroppedSink(t *testing.T) {
	S1, S2 := chn(31, 0), chn(32, 0)
	for _, gone := range []bool{false, true} {
		e := newEnv(t, []headers.Channel{a0}, []headers.TopicID{S1.Topic, S2.Topic})
		n := e.node()
		s1 := prepare(t, n, S1) // seq 0 on S1
		_ = s1
		s2 := prepare(t, n, S2)
		if v, ok := s2.Clock.Seq(S1, n.Sender()); !ok || v != 0 {
			t.Fatal("precondition: stamp to S2 claims S1 by sequence")
		}
		flush(t, n)
		e.offs.ends[S1.Topic] = []int64{4}
		e.cfg.Sinks = []headers.TopicID{S2.Topic}
		if gone {
			e.offs.gone[S1.Topic] = true
		}
		m := e.node()
		// The claim comes back through a downstream record's clock.
		wantCoords(t, "echo", feed(t, m, rec(t, a0, 0, st{seqs: []headers.SeqEntry{sq(S1, m.Sender(), 0)}})), at(a0, 0))
		s := prepare(t, m, S2)
		if _, ok := s.Clock.Seq(S1, m.Sender()); ok {
			t.Fatalf("gone=%v: stamp keeps the echoed self claim on the dropped sink", gone)
		}
		o, ok := s.Clock.Offset(S1)
		if gone && ok {
			t.Fatalf("gone sink still claimed by offset %d", o)
		}
		if !gone && (!ok || o != 3) {
			t.Fatalf("dropped sink claim %d %v, want offset 3", o, ok)
		}
	}
}

func TestEchoedPriorIncarnationClaimOnCurrentSinkUpgradesToOwnOutputs(t *testing.T) {
	S1, S2 := chn(31, 0), chn(32, 0)
	e := newEnv(t, []headers.Channel{a0}, []headers.TopicID{S1.Topic, S2.Topic})
	n := e.node()
	prepare(t, n, S1)
	prepare(t, n, S1) // seq 1
	flush(t, n)
	e.offs.ends[S1.Topic] = []int64{20}
	m := e.node()
	feed(t, m, rec(t, a0, 0, st{seqs: []headers.SeqEntry{sq(S1, m.Sender(), 1)}}))
	s := prepare(t, m, S2)
	if _, ok := s.Clock.Seq(S1, m.Sender()); ok {
		t.Fatal("prior-incarnation self claim kept in sequence form")
	}
	if o, _ := s.Clock.Offset(S1); o != 19 {
		t.Fatalf("own outputs claim on S1 = %d, want 19", o)
	}
	// This incarnation's send to S1 is claimed by sequence again.
	prepare(t, m, S1)
	if v, ok := prepare(t, m, S2).Clock.Seq(S1, m.Sender()); !ok || v != 2 {
		t.Fatalf("this incarnation's claim = %d %v, want 2", v, ok)
	}
}

func TestTruncate(t *testing.T) {
	S := chn(31, 0)
	e := newEnv(t, []headers.Channel{a0, b0}, []headers.TopicID{S.Topic})
	n := e.node()
	gone := chn(40, 0)
	other := headers.SenderID{3}
	feed(t, n, rec(t, a0, 5, st{offs: []headers.OffsetEntry{off(x0, 10), off(chn(9, 1), 3), off(gone, 8)}, seqs: []headers.SeqEntry{sq(gone, other, 1), sq(x0, other, 2)}}))
	bounds := []Bound{
		{Topic: x0.Topic, LogStarts: []int64{11, 3}}, // x/0 ≤ 10 goes; x/1 at 3 stays
		{Topic: gone.Topic, Gone: true},
		{Topic: a0.Topic, LogStarts: []int64{100}}, // frontier is never truncated
	}
	if err := n.Truncate(bounds); err != nil {
		t.Fatal(err)
	}
	s := prepare(t, n, S)
	if _, ok := s.Clock.Offset(x0); ok {
		t.Error("entry below log start survived")
	}
	if o, ok := s.Clock.Offset(chn(9, 1)); !ok || o != 3 {
		t.Error("entry at log start was dropped")
	}
	if _, ok := s.Clock.Offset(gone); ok {
		t.Error("gone topic survived")
	}
	if _, ok := s.Clock.Seq(gone, other); ok {
		t.Error("gone topic sequence claim survived")
	}
	if _, ok := s.Clock.Seq(x0, other); !ok {
		t.Error("sequence claim on a live topic dropped")
	}
	if o, _ := s.Clock.Offset(a0); o != 5 {
		t.Errorf("frontier truncated: %d", o)
	}
	flush(t, n)
	if s2 := prepare(t, e.node(), S); s2.Clock.NumOffsets() != s.Clock.NumOffsets() {
		t.Error("truncation not persisted")
	}
}

func TestTruncateToLogStarts(t *testing.T) {
	S := chn(31, 0)
	e := newEnv(t, []headers.Channel{a0}, []headers.TopicID{S.Topic})
	n := e.node()
	feed(t, n, rec(t, a0, 0, st{offs: []headers.OffsetEntry{off(x0, 10), off(c0, 4)}}))
	if got := n.StampTopics(); !reflect.DeepEqual(got, []headers.TopicID{c0.Topic, x0.Topic}) {
		t.Fatalf("StampTopics = %v", got)
	}
	if c := n.Counters(); c.StampOffsetEntries != 2 {
		t.Fatalf("stamp-side entries %d before truncation", c.StampOffsetEntries)
	}
	e.offs.starts[x0.Topic] = []int64{11}
	e.offs.gone[c0.Topic] = true
	e.offs.err = errors.New("broker down")
	if err := n.TruncateToLogStarts(context.Background()); !errors.Is(err, e.offs.err) {
		t.Fatalf("err %v", err)
	}
	if c := n.Counters(); c.StampOffsetEntries != 2 {
		t.Fatal("a failed sweep truncated")
	}
	e.offs.err = nil
	if err := n.TruncateToLogStarts(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := n.Counters(); c.StampOffsetEntries != 0 {
		t.Fatalf("stamp-side entries %d after truncation", c.StampOffsetEntries)
	}
	if _, err := n.OnRecord(plain(a0, 1)); err != nil {
		t.Fatalf("a failed sweep broke the node: %v", err)
	}
}

func TestDeterministicRunsGiveIdenticalOutputsAndStore(t *testing.T) {
	chans := []headers.Channel{a0, b0, c0}
	senders := []headers.SenderID{{1}, {2}, {3}}
	// 300 records in append order; each claims earlier records only (as real
	// claims do), by offset or by its sender's sequence. Channels are fed
	// with different lags, so claims on lagging channels hold records.
	type planned struct {
		r   *Record
		key int64
	}
	var plan []planned
	var offs [3]int64
	type sent struct {
		ch     int
		o, seq int64
	}
	var hist []sent
	for i := range int64(300) {
		ci := int(i*7%11) % 3
		offs[ci] += 1 + i%2 // every other record follows a marker
		o := offs[ci]
		s := senders[ci]
		var claims st
		claims.sender, claims.seq = &s, i
		if len(hist) > 0 {
			h := hist[(i*13)%int64(len(hist))]
			if i%3 == 0 {
				claims.seqs = []headers.SeqEntry{sq(chans[h.ch], senders[h.ch], h.seq)}
			} else {
				claims.offs = []headers.OffsetEntry{off(chans[h.ch], h.o), off(x0, i), off(chn(8, 0), i), off(chn(8, 1), i)}
			}
		}
		hist = append(hist, sent{ci, o, i})
		plan = append(plan, planned{rec(t, chans[ci], o, claims), i + []int64{40, 15, 0}[ci]})
	}
	slices.SortStableFunc(plan, func(x, y planned) int { return cmp.Compare(x.key, y.key) })

	run := func(walk bool) ([]byte, []Mutation) {
		S, T := chn(31, 0), chn(32, 1)
		e := newEnv(t, []headers.Channel{c0, a0, b0}, []headers.TopicID{T.Topic, S.Topic})
		e.walk = walk
		n := e.node()
		var out bytes.Buffer
		maxHeld, delivered := 0, 0
		for i, p := range plan {
			ds, err := n.OnRecord(p.r)
			if err != nil {
				t.Fatal(err)
			}
			maxHeld = max(maxHeld, n.Counters().Held)
			for _, d := range ds {
				delivered++
				out.WriteString(d.Coordinate.String() + ";")
				dest := S
				if d.Offset%2 == 0 {
					dest = T
				}
				st := prepare(t, n, dest)
				b, _ := headers.EncodeVC(&st.Clock)
				out.Write(b)
			}
			if i%7 == 0 {
				flush(t, n)
				if i%21 == 0 {
					n = e.node()
				}
			}
			if i%5 == 0 {
				// The position is just past the record fed.
				ds, err := n.PositionAdvance(p.r.Channel, p.r.Offset+1)
				if err != nil {
					t.Fatal(err)
				}
				for _, d := range ds {
					delivered++
					out.WriteString(d.Coordinate.String() + ";")
				}
			}
		}
		flush(t, n)
		if maxHeld < 10 || delivered != len(plan) {
			t.Fatalf("run too quiet or wedged: max held %d, delivered %d of %d", maxHeld, delivered, len(plan))
		}
		return out.Bytes(), e.store.Entries()
	}
	o1, s1 := run(false)
	o2, s2 := run(false)
	if !bytes.Equal(o1, o2) || !reflect.DeepEqual(s1, s2) {
		t.Fatal("two identical runs differ")
	}
	// The two forms of the gate's restriction agree.
	o3, s3 := run(true)
	if !bytes.Equal(o1, o3) || !reflect.DeepEqual(s1, s3) {
		t.Fatal("the lookup and walk forms of the gate disagree")
	}
}

// TestReleaseAfterShrinkDeliversRestoredHeads: a held record waiting only
// on a channel the node no longer consumes is released by Release after New.
func TestReleaseAfterShrinkDeliversRestoredHeads(t *testing.T) {
	e := newEnv(t, []headers.Channel{a0, b0, c0}, nil)
	n := e.node()
	feed(t, n, rec(t, b0, 4, st{offs: []headers.OffsetEntry{off(c0, 5)}}))
	flush(t, n)
	e.cfg.Inputs = []headers.Channel{a0, b0}
	m, err := New(context.Background(), e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ds, err := m.Release()
	if err != nil {
		t.Fatal(err)
	}
	wantCoords(t, "Release", coords(ds), at(b0, 4))
	if ds[0].Timestamp != 1004 || string(ds[0].Value) != "v" {
		t.Fatalf("released record %+v", ds[0].Record)
	}
}

func TestDeliveryCloneOutlivesTheNextCall(t *testing.T) {
	n := newEnv(t, []headers.Channel{a0}, nil).node()
	ds, _ := n.OnRecord(rec(t, a0, 0, st{offs: []headers.OffsetEntry{off(x0, 1)}}))
	kept := ds[0].Clone()
	n.OnRecord(rec(t, a0, 1, st{offs: []headers.OffsetEntry{off(x0, 2)}}))
	if o, _ := kept.Stamp.Clock.Offset(x0); o != 1 || kept.Offset != 0 {
		t.Fatalf("clone changed: %v offset %d", o, kept.Offset)
	}
}

// TestHoldsAfterQueueDrainedWithinAStep: a queue that held, drained and
// held again between two flushes persists the right record at each index.
func TestHoldsAfterQueueDrainedWithinAStep(t *testing.T) {
	e := newEnv(t, []headers.Channel{a0, b0}, nil)
	n := e.node()
	val := func(r *Record, v string) *Record { r.Value = []byte(v); return r }
	feed(t, n, val(rec(t, b0, 0, st{offs: []headers.OffsetEntry{off(a0, 0)}}), "b0"))
	feed(t, n, val(plain(b0, 1), "b1"))
	wantCoords(t, "a@0", feed(t, n, plain(a0, 0)), at(a0, 0), at(b0, 0), at(b0, 1))
	feed(t, n, val(rec(t, b0, 2, st{offs: []headers.OffsetEntry{off(a0, 1)}}), "b2"))
	feed(t, n, val(plain(b0, 3), "b3"))
	flush(t, n)
	m := e.node()
	ds, err := m.OnRecord(plain(a0, 1))
	if err != nil {
		t.Fatal(err)
	}
	wantCoords(t, "a@1", coords(ds), at(a0, 1), at(b0, 2), at(b0, 3))
	if string(ds[1].Value) != "b2" || string(ds[2].Value) != "b3" {
		t.Fatalf("restored values %q %q", ds[1].Value, ds[2].Value)
	}
}

// TestRefedHeldRecordAfterRestartIsAReplay: a host that resumes below a
// restored held record (it should resume at ResumePositions) gets the
// re-fetched copy dropped as a replay, never delivered twice.
func TestRefedHeldRecordAfterRestartIsAReplay(t *testing.T) {
	e := newEnv(t, []headers.Channel{a0, b0}, nil)
	n := e.node()
	feed(t, n, rec(t, b0, 3, st{offs: []headers.OffsetEntry{off(a0, 0)}}))
	flush(t, n)
	m := e.node()
	if got := m.ResumePositions(); len(got) != 1 || got[0] != (Position{b0, 4}) {
		t.Fatalf("ResumePositions %v", got)
	}
	wantCoords(t, "re-fed b@3", feed(t, m, rec(t, b0, 3, st{offs: []headers.OffsetEntry{off(a0, 0)}})))
	wantCoords(t, "a@0", feed(t, m, plain(a0, 0)), at(a0, 0), at(b0, 3))
	if c := m.Counters(); c.ReplaysSkipped != 1 {
		t.Fatalf("counters %+v", c)
	}
}

func TestDeliveriesSurvivePrepareSendAndFlush(t *testing.T) {
	S := chn(31, 0)
	n := newEnv(t, []headers.Channel{a0, b0}, []headers.TopicID{S.Topic}).node()
	feed(t, n, rec(t, b0, 0, st{offs: []headers.OffsetEntry{off(a0, 0), off(x0, 9)}}))
	ds, err := n.OnRecord(rec(t, a0, 0, st{offs: []headers.OffsetEntry{off(x0, 3)}}))
	if err != nil || len(ds) != 2 {
		t.Fatalf("%v %v", coords(ds), err)
	}
	for range ds {
		prepare(t, n, S)
	}
	flush(t, n)
	if _, err := n.ExplainHolds(); err != nil {
		t.Fatal(err)
	}
	if o, _ := ds[0].Stamp.Clock.Offset(x0); o != 3 || ds[0].Offset != 0 || ds[0].Channel != a0 {
		t.Fatalf("first delivery changed: %v x=%d", ds[0].Coordinate, o)
	}
	if o, _ := ds[1].Stamp.Clock.Offset(x0); o != 9 || ds[1].Channel != b0 {
		t.Fatalf("second delivery changed: %v x=%d", ds[1].Coordinate, o)
	}
}
