package protocol

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/parsley-go/parsley/headers"
)

// Directed tests for issue 14: stamps name only committed records (wire
// constraint 8), sequences never restart below earlier ones, and four
// rescope and delivery defects.

func sent(t testing.TB, n *Node, c headers.Coordinate) {
	t.Helper()
	if err := n.Sent(c); err != nil {
		t.Fatalf("Sent %v: %v", c, err)
	}
}

func wantClaim(t testing.TB, what string, s *headers.Stamp, ch headers.Channel, want int64) {
	t.Helper()
	got, ok := s.Clock.Offset(ch)
	if want < 0 {
		if ok {
			t.Fatalf("%s: stamp claims %v@%d, want no claim", what, ch, got)
		}
		return
	}
	if !ok || got != want {
		t.Fatalf("%s: stamp claims %v@%d (present %v), want %d", what, ch, got, ok, want)
	}
}

// A frontier folded past a trailing marker (position advance) or a skipped
// run (the bridge below a held head) is not a record: the stamp claims the
// highest delivered record, before and after a restart.
func TestStampClaimsDeliveredRecordNotFoldedFrontier(t *testing.T) {
	S := chn(31, 0)
	e := newEnv(t, []headers.Channel{a0, b0, c0}, []headers.TopicID{S.Topic})
	n := e.node()
	wantCoords(t, "a@3", feed(t, n, plain(a0, 3)), at(a0, 3))
	advance(t, n, a0, 5) // a@4 is a commit marker
	wantClaim(t, "after position advance", prepare(t, n, S), a0, 3)

	wantCoords(t, "b@2", feed(t, n, plain(b0, 2)), at(b0, 2))
	// b@3..5 are markers or aborted records; b@6 is held on c@9, and the
	// bridge folds b's frontier to 5 below it.
	wantCoords(t, "b@6 held", feed(t, n, rec(t, b0, 6, st{offs: []headers.OffsetEntry{off(c0, 9)}})))
	s := prepare(t, n, S)
	wantClaim(t, "behind a held head", s, b0, 2)
	flush(t, n)

	m := e.node()
	s = prepare(t, m, S)
	wantClaim(t, "a after restart", s, a0, 3)
	wantClaim(t, "b after restart", s, b0, 2)
}

// Own outputs are the acknowledged offsets of earlier incarnations' sends,
// not the sink's end offset, which under exactly-once is a commit marker.
func TestOwnOutputsClaimAcknowledgedSendsNotEndOffset(t *testing.T) {
	S, S1 := chn(31, 0), chn(31, 1)
	e := newEnv(t, []headers.Channel{a0}, []headers.TopicID{S.Topic})
	e.offs.ends[S.Topic] = []int64{0, 0}
	n := e.node()
	prepare(t, n, S)
	sent(t, n, at(S, 3))
	prepare(t, n, S)
	sent(t, n, at(S, 4))
	sent(t, n, at(S, 2)) // acknowledgements may come back in any order
	flush(t, n)
	e.offs.ends[S.Topic] = []int64{6, 9} // S/0@5 is our commit marker; S/1 holds others' records
	m := e.node()
	s := prepare(t, m, S1)
	wantClaim(t, "own send", s, S, 4)
	wantClaim(t, "a sink partition this node never sent to", s, S1, -1)
}

// The host may only report sends the node stamped.
func TestSentRefusesWhatWasNotPrepared(t *testing.T) {
	S := chn(31, 0)
	e := newEnv(t, []headers.Channel{a0}, []headers.TopicID{S.Topic})
	n := e.node()
	wantErr(t, n.Sent(at(S, 0)), ErrInvalidRecord)
	wantErr(t, n.Sent(at(a0, 0)), ErrUndeclaredSink)
	prepare(t, n, S)
	wantErr(t, n.Sent(at(S, -1)), ErrInvalidRecord)
	sent(t, n, at(S, 0))
	flush(t, n)
	// A send of an earlier incarnation is not this one's to report.
	wantErr(t, e.node().Sent(at(S, 1)), ErrInvalidRecord)
}

// A departing input is carried at its highest delivered record, not at a
// frontier folded past markers.
func TestShrinkCarriesClaimNotFrontier(t *testing.T) {
	S := chn(31, 0)
	e := newEnv(t, []headers.Channel{a0, b0}, []headers.TopicID{S.Topic})
	n := e.node()
	feed(t, n, plain(b0, 6))
	advance(t, n, b0, 8)
	flush(t, n)
	e.cfg.Inputs = []headers.Channel{a0}
	wantClaim(t, "carried", prepare(t, e.node(), S), b0, 6)
}

// Defect 1: a sender whose state was reset (store and changelog gone)
// keeps its identity, so its new sequences must start above every earlier
// one, or a downstream mark left by the old incarnation satisfies a new
// claim and reorders.
func TestSenderResetSequencesStartAboveEarlierSends(t *testing.T) {
	A, B := chn(41, 0), chn(42, 0)
	up := newEnv(t, nil, []headers.TopicID{A.Topic, B.Topic})
	down := newEnv(t, []headers.Channel{A, B}, nil)
	down.cfg.Stage = "down"
	d := down.node()

	// The old incarnation sends sequences 0..5 to A, at offsets 0..5;
	// downstream delivers them all.
	old := up.node()
	for o := range int64(6) {
		s := prepare(t, old, A)
		sent(t, old, at(A, o))
		wantCoords(t, "old send", feed(t, d, asRecord(t, s, A, o)), at(A, o))
	}
	flush(t, old)

	// Reset: the upstream store is gone; A's end is 6.
	up.store = NewMemStore()
	up.cfg.Store = up.store
	up.offs.ends[A.Topic] = []int64{6}
	fresh := up.node()
	x := prepare(t, fresh, A)
	if x.Seq <= 5 {
		t.Fatalf("after a reset the first sequence on A is %d, at or below the old incarnation's 5", x.Seq)
	}
	y := prepare(t, fresh, B)
	if v, ok := y.Clock.Seq(A, fresh.Sender()); !ok || v != x.Seq {
		t.Fatalf("Y's stamp claims (A, sender, %d %v), want %d", v, ok, x.Seq)
	}
	wantCoords(t, "Y before X", feed(t, d, asRecord(t, y, B, 0)))
	wantCoords(t, "X releases Y", feed(t, d, asRecord(t, x, A, 6)), at(A, 6), at(B, 0))
}

// Without a reset the stored sequence continues as before.
func TestSequenceSeedOnlyWithoutStoredSequence(t *testing.T) {
	A := chn(41, 0)
	e := newEnv(t, nil, []headers.TopicID{A.Topic})
	e.offs.ends[A.Topic] = []int64{50}
	n := e.node()
	if s := prepare(t, n, A); s.Seq != 50 {
		t.Fatalf("first sequence = %d, want the end offset 50", s.Seq)
	}
	flush(t, n)
	e.offs.ends[A.Topic] = []int64{90}
	if s := prepare(t, e.node(), A); s.Seq != 51 {
		t.Fatalf("sequence after restart = %d, want the stored 50 + 1", s.Seq)
	}
}

// Defect 2: an input that leaves and returns keeps its delivered-sequence
// marks, so a claim they resolved does not wedge on records never fetched
// again.
func TestReturningInputKeepsDeliveredSequenceMarks(t *testing.T) {
	e := newEnv(t, []headers.Channel{a0, b0}, nil)
	n := e.node()
	s := headers.SenderID{7}
	wantCoords(t, "a@4", feed(t, n, rec(t, a0, 4, st{sender: &s, seq: 3})), at(a0, 4))
	flush(t, n)
	e.cfg.Inputs = []headers.Channel{b0}
	flush(t, e.node())
	e.cfg.Inputs = []headers.Channel{a0, b0}
	m := e.node()
	if want := []Position{{a0, 5}}; !reflect.DeepEqual(m.ResumePositions(), want) {
		t.Fatalf("ResumePositions = %v, want %v", m.ResumePositions(), want)
	}
	got := feed(t, m, rec(t, b0, 0, st{seqs: []headers.SeqEntry{sq(a0, s, 3)}}))
	if len(got) == 0 {
		h, _ := m.ExplainHolds()
		t.Fatalf("claim resolved before the shrink is held after the input returned: %+v", h)
	}
	wantCoords(t, "b@0", got, at(b0, 0))
}

// Defect 3: a replay is dropped before its stamp is read.
func TestReplayWithUndecodableStampIsDropped(t *testing.T) {
	e := newEnv(t, []headers.Channel{a0}, nil)
	n := e.node()
	feed(t, n, plain(a0, 0))
	feed(t, n, plain(a0, 1))
	flush(t, n)
	m := e.node()
	bad := &Record{Coordinate: at(a0, 1), Headers: []headers.Header{{Key: headers.HeaderVC, Value: []byte{9, 9}}}}
	if ds, err := m.OnRecord(bad); err != nil || len(ds) != 0 {
		t.Fatalf("replay with an undecodable stamp: %v %v, want dropped", coords(ds), err)
	}
	if c := m.Counters().ReplaysSkipped; c != 1 {
		t.Fatalf("ReplaysSkipped = %d, want 1", c)
	}
	// Above the frontier the same stamp still fails closed.
	bad.Offset = 2
	if _, err := m.OnRecord(bad); !errors.Is(err, headers.ErrUndecodable) {
		t.Fatalf("new record with an undecodable stamp: %v, want ErrUndecodable", err)
	}
}

// Defect 4: a former sink that becomes an input in the same redeploy is
// seeded from the carried ancestry that redeploy folds in.
func TestFormerSinkBecomingInputIsSeededInOneRedeploy(t *testing.T) {
	F := chn(33, 0)
	e := newEnv(t, []headers.Channel{a0}, []headers.TopicID{F.Topic})
	n := e.node()
	prepare(t, n, F)
	sent(t, n, at(F, 4))
	flush(t, n)
	e.offs.ends[F.Topic] = []int64{6}
	e.cfg.Inputs, e.cfg.Sinks = []headers.Channel{a0, F}, nil
	m := e.node()
	if want := []Position{{F, 5}}; !reflect.DeepEqual(m.ResumePositions(), want) {
		t.Fatalf("ResumePositions = %v, want %v: the former sink is not seeded from its fold", m.ResumePositions(), want)
	}
	wantCoords(t, "own earlier output is not delivered back", feed(t, m, plain(F, 4)))
}

// Defect 5: a delivery never moves the frontier backwards; state that
// would make it fails the node.
func TestDeliveryBelowFrontierFailsTheNode(t *testing.T) {
	e := newEnv(t, []headers.Channel{b0, c0}, nil)
	n := e.node()
	wantCoords(t, "b@5 held", feed(t, n, rec(t, b0, 5, st{offs: []headers.OffsetEntry{off(c0, 3)}})))
	flush(t, n)
	// Inconsistent state: b's held record survives under a scope without b,
	// and carried ancestry knows b up to 9.
	var ca headers.Clock
	ca.SetOffset(b0, 9)
	vc, err := headers.EncodeVC(&ca)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string][]byte{keyScope: encodeScope(scope{inputs: []headers.Channel{c0}}), keyCarried: vc} {
		if err := e.store.Put(k, v); err != nil {
			t.Fatal(err)
		}
	}
	m, err := New(context.Background(), e.cfg)
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.OnRecord(plain(c0, 3))
	wantErr(t, err, ErrCorruptState)
	if _, err := m.OnRecord(plain(c0, 4)); !errors.Is(err, ErrNodeFailed) {
		t.Fatalf("node still usable after a backwards frontier: %v", err)
	}
}

// A version 1 store (8-byte frontiers, no acknowledged sends) upgrades in
// place; its frontier is its claim, as version 1 stamped it.
func TestVersion1StoreUpgrades(t *testing.T) {
	S := chn(31, 0)
	e := newEnv(t, []headers.Channel{a0}, []headers.TopicID{S.Topic})
	n := e.node()
	feed(t, n, plain(a0, 2))
	advance(t, n, a0, 4)
	flush(t, n)
	for k, v := range map[string][]byte{keyVersion: {0, 0, 0, 1}, pfxFront + chanKey(a0): appendInt64(nil, 3)} {
		if err := e.store.Put(k, v); err != nil {
			t.Fatal(err)
		}
	}
	m := e.node()
	wantClaim(t, "version 1 frontier", prepare(t, m, S), a0, 3)
	if v, _, _ := e.store.Get(keyVersion); !reflect.DeepEqual(v, []byte{0, 0, 0, formatVersion}) {
		t.Fatalf("version after init = %x", v)
	}
}
