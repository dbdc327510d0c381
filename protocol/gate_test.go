package protocol

import (
	"testing"

	"github.com/parsley-go/parsley/headers"
)

var (
	a0 = chn(1, 0)
	b0 = chn(2, 0)
	c0 = chn(3, 0)
	x0 = chn(9, 0) // never consumed
)

func TestSenderIDForMatchesJavaNameUUIDFromBytes(t *testing.T) {
	// Vectors computed independently with Python's hashlib, reproducing
	// java.util.UUID.nameUUIDFromBytes (MD5, version 3, IETF variant).
	tests := []struct {
		app, stage string
		part       int32
		want       string
	}{
		{"orders-app", "enricher", 3, "60751b8f-b3ce-38ea-8f86-4aa8946bcd24"},
		{"app", "stage", 0, "d0cdb9ca-166c-3f23-ac90-cadf5ca97f76"},
		{"ä", "ß", 2147483647, "4a0cbf58-2b1a-3b4e-9105-76527aded632"},
	}
	for _, tt := range tests {
		if got := SenderIDFor(tt.app, tt.stage, tt.part).String(); got != tt.want {
			t.Errorf("SenderIDFor(%q, %q, %d) = %s, want %s", tt.app, tt.stage, tt.part, got, tt.want)
		}
	}
}

func TestUnstampedRecordDeliversAtOnce(t *testing.T) {
	n := newEnv(t, []headers.Channel{a0}, nil).node()
	wantCoords(t, "a@3", feed(t, n, plain(a0, 3)), at(a0, 3))
	wantCoords(t, "a@4", feed(t, n, plain(a0, 4)), at(a0, 4))
	if c := n.Counters(); c.Delivered != 2 || c.Held != 0 {
		t.Fatalf("counters %+v", c)
	}
}

func TestGateHoldsUntilCauseDeliveredThenCascades(t *testing.T) {
	n := newEnv(t, []headers.Channel{a0, b0, c0}, nil).node()
	// c@0 claims b@4, which claims a@2: a chain across three channels.
	wantCoords(t, "c@0", feed(t, n, rec(t, c0, 0, st{offs: []headers.OffsetEntry{off(b0, 4)}})))
	wantCoords(t, "c@1", feed(t, n, plain(c0, 1))) // behind the held head
	wantCoords(t, "b@4", feed(t, n, rec(t, b0, 4, st{offs: []headers.OffsetEntry{off(a0, 2)}})))
	if c := n.Counters(); c.Held != 3 || c.HeldHeads != 2 {
		t.Fatalf("counters %+v", c)
	}
	wantCoords(t, "a@2", feed(t, n, plain(a0, 2)), at(a0, 2), at(b0, 4), at(c0, 0), at(c0, 1))
}

// TestGateClaimAboveFrontierWaitsForExactOffset runs with a narrow clock
// (the gate walks it) and a wide one (the gate looks inputs up in it).
func TestGateClaimAboveFrontierWaitsForExactOffset(t *testing.T) {
	for _, width := range []int{1, 8} {
		n := newEnv(t, []headers.Channel{a0, b0}, nil).node()
		wantCoords(t, "a@0", feed(t, n, plain(a0, 0)), at(a0, 0))
		wantCoords(t, "b@0", feed(t, n, rec(t, b0, 0, wideClaims(width, off(a0, 1)))))
		wantCoords(t, "a@1", feed(t, n, plain(a0, 1)), at(a0, 1), at(b0, 0))
	}
}

func TestNormaliseIgnoresOwnChannelClaims(t *testing.T) {
	n := newEnv(t, []headers.Channel{a0}, nil).node()
	// A claim on its own channel at or above its own offset is a self-cycle.
	wantCoords(t, "a@5", feed(t, n, rec(t, a0, 5, st{offs: []headers.OffsetEntry{off(a0, 9)}})), at(a0, 5))
	s := headers.SenderID{7}
	wantCoords(t, "a@6", feed(t, n, rec(t, a0, 6, st{seqs: []headers.SeqEntry{sq(a0, s, 3)}})), at(a0, 6))
}

func TestRestrictIgnoresUnconsumedChannels(t *testing.T) {
	n := newEnv(t, []headers.Channel{a0}, nil).node()
	s := headers.SenderID{7}
	wantCoords(t, "a@0", feed(t, n, rec(t, a0, 0, st{offs: []headers.OffsetEntry{off(x0, 100)}, seqs: []headers.SeqEntry{sq(x0, s, 4)}})), at(a0, 0))
}

func TestSequenceClaimWaitsForSendersDelivery(t *testing.T) {
	n := newEnv(t, []headers.Channel{a0, b0}, nil).node()
	s := headers.SenderID{7}
	wantCoords(t, "b@0", feed(t, n, rec(t, b0, 0, st{seqs: []headers.SeqEntry{sq(a0, s, 1)}})))
	// Sender s's seq 0 on a: not enough.
	wantCoords(t, "a@10", feed(t, n, rec(t, a0, 10, st{sender: &s, seq: 0})), at(a0, 10))
	// Another sender's record does not resolve it.
	other := headers.SenderID{8}
	wantCoords(t, "a@11", feed(t, n, rec(t, a0, 11, st{sender: &other, seq: 5})), at(a0, 11))
	wantCoords(t, "a@12", feed(t, n, rec(t, a0, 12, st{sender: &s, seq: 1})), at(a0, 12), at(b0, 0))
}

func TestSeedFoldsHistoryBelowFirstRecord(t *testing.T) {
	n := newEnv(t, []headers.Channel{a0, b0}, nil).node()
	wantCoords(t, "b@0", feed(t, n, rec(t, b0, 0, st{offs: []headers.OffsetEntry{off(a0, 50)}})))
	// The first record on a is at 100: everything below is baseline.
	wantCoords(t, "a@100", feed(t, n, rec(t, a0, 100, st{offs: []headers.OffsetEntry{off(c0, 1)}})), at(a0, 100), at(b0, 0))
}

func TestSeedAppliesEvenWhenFirstRecordIsHeld(t *testing.T) {
	n := newEnv(t, []headers.Channel{a0, b0, c0}, nil).node()
	wantCoords(t, "b@0", feed(t, n, rec(t, b0, 0, st{offs: []headers.OffsetEntry{off(a0, 50)}})))
	// a@100 is itself held (claims c@0), but its arrival proves a's history
	// below 100 is baseline, which releases b@0.
	wantCoords(t, "a@100", feed(t, n, rec(t, a0, 100, st{offs: []headers.OffsetEntry{off(c0, 0)}})), at(b0, 0))
}

func TestBridgeFoldsSkippedRunWithEmptyQueue(t *testing.T) {
	n := newEnv(t, []headers.Channel{a0, b0}, nil).node()
	wantCoords(t, "a@0", feed(t, n, plain(a0, 0)), at(a0, 0))
	wantCoords(t, "b@0", feed(t, n, rec(t, b0, 0, st{offs: []headers.OffsetEntry{off(a0, 3)}}))) // a@3 is a marker
	wantCoords(t, "a@5", feed(t, n, rec(t, a0, 5, st{offs: []headers.OffsetEntry{off(b0, 0)}})), at(b0, 0), at(a0, 5))
}

// TestSkippedRunBehindHeldHead: a@15 arrives across a marker gap (11–14)
// while a@10 is held. When a@10 delivers, the gap folds to one below the new
// head even though a@15 is itself held, which is the only thing that can
// release c@0's claim on the marker a@13.
func TestSkippedRunBehindHeldHead(t *testing.T) {
	n := newEnv(t, []headers.Channel{a0, b0, c0}, nil).node()
	wantCoords(t, "a@10", feed(t, n, rec(t, a0, 10, st{offs: []headers.OffsetEntry{off(b0, 5)}})))
	wantCoords(t, "a@15", feed(t, n, rec(t, a0, 15, st{offs: []headers.OffsetEntry{off(b0, 8)}})))
	wantCoords(t, "c@0", feed(t, n, rec(t, c0, 0, st{offs: []headers.OffsetEntry{off(a0, 13)}})))
	wantCoords(t, "b@5", feed(t, n, plain(b0, 5)), at(b0, 5), at(a0, 10), at(c0, 0))
	if c := n.Counters(); c.SkippedRunFolds == 0 || c.Held != 1 {
		t.Fatalf("counters %+v", c)
	}
	wantCoords(t, "b@8", feed(t, n, plain(b0, 8)), at(b0, 8), at(a0, 15))
}

func TestTrailingMarkerReleasedOnlyByPositionAdvance(t *testing.T) {
	n := newEnv(t, []headers.Channel{a0, b0}, nil).node()
	wantCoords(t, "a@5", feed(t, n, plain(a0, 5)), at(a0, 5))
	// b@0 claims a@6: the commit marker after a@5. No record will follow.
	wantCoords(t, "b@0", feed(t, n, rec(t, b0, 0, st{offs: []headers.OffsetEntry{off(a0, 6)}})))
	wantCoords(t, "stale position", advance(t, n, a0, 6))
	wantCoords(t, "b position", advance(t, n, b0, 1))
	wantCoords(t, "position past the marker", advance(t, n, a0, 7), at(b0, 0))
	if c := n.Counters(); c.PositionFolds != 1 {
		t.Fatalf("counters %+v", c)
	}
}

func TestPositionAdvanceWaitsForQueueToDrain(t *testing.T) {
	n := newEnv(t, []headers.Channel{a0, b0, c0}, nil).node()
	wantCoords(t, "a@0", feed(t, n, rec(t, a0, 0, st{offs: []headers.OffsetEntry{off(b0, 0)}})))
	wantCoords(t, "c@0", feed(t, n, rec(t, c0, 0, st{offs: []headers.OffsetEntry{off(a0, 3)}})))
	// Position 4 on a with a@0 held: it cannot fold past the held head.
	wantCoords(t, "a position", advance(t, n, a0, 4))
	// Once a drains, the recorded position folds and releases c@0.
	wantCoords(t, "b@0", feed(t, n, plain(b0, 0)), at(b0, 0), at(a0, 0), at(c0, 0))
}

func TestPositionAdvanceSeedsAnUnfedChannel(t *testing.T) {
	n := newEnv(t, []headers.Channel{a0, b0}, nil).node()
	wantCoords(t, "b@0", feed(t, n, rec(t, b0, 0, st{offs: []headers.OffsetEntry{off(a0, 2)}})))
	wantCoords(t, "a position 3", advance(t, n, a0, 3), at(b0, 0))
}

func TestCascadeOrderIsChannelOrder(t *testing.T) {
	n := newEnv(t, []headers.Channel{c0, a0, b0}, nil).node() // declared unsorted
	wantCoords(t, "c@0", feed(t, n, rec(t, c0, 0, st{offs: []headers.OffsetEntry{off(x0, 0), off(b0, 0)}})))
	wantCoords(t, "a@0", feed(t, n, rec(t, a0, 0, st{offs: []headers.OffsetEntry{off(b0, 0)}})))
	wantCoords(t, "b@0", feed(t, n, plain(b0, 0)), at(b0, 0), at(a0, 0), at(c0, 0))
}

func TestReplayGuardDropsAtOrBelowFrontier(t *testing.T) {
	e := newEnv(t, []headers.Channel{a0}, nil)
	n := e.node()
	feed(t, n, plain(a0, 4))
	flush(t, n)
	n = e.node()
	wantCoords(t, "replayed a@3", feed(t, n, plain(a0, 3)))
	wantCoords(t, "replayed a@4", feed(t, n, plain(a0, 4)))
	wantCoords(t, "a@5", feed(t, n, plain(a0, 5)), at(a0, 5))
	if c := n.Counters(); c.ReplaysSkipped != 2 {
		t.Fatalf("counters %+v", c)
	}
}

// TestTransitiveClaimThroughHopThatDoesNotConsumeOrigin: A consumes X and
// sends to Y; B consumes only Y and sends to Z; C consumes X and Z. C must
// hold z until it delivered x, although B never consumed X: the claim on x
// survives B's hop because B folds the full clock of y at receive.
func TestTransitiveClaimThroughHopThatDoesNotConsumeOrigin(t *testing.T) {
	X, Y, Z := chn(21, 0), chn(22, 0), chn(23, 0)
	ea := newEnv(t, []headers.Channel{X}, []headers.TopicID{Y.Topic})
	ea.cfg.Stage = "A"
	eb := newEnv(t, []headers.Channel{Y}, []headers.TopicID{Z.Topic})
	eb.cfg.Stage = "B"
	ec := newEnv(t, []headers.Channel{X, Z}, nil)
	ec.cfg.Stage = "C"
	A, B, C := ea.node(), eb.node(), ec.node()

	feed(t, A, plain(X, 0))
	feed(t, A, plain(X, 1)) // x: the cause
	y := asRecord(t, prepare(t, A, Y), Y, 0)
	wantCoords(t, "B gets y", feed(t, B, y), at(Y, 0))
	zs := prepare(t, B, Z)
	if o, ok := zs.Clock.Offset(X); !ok || o < 1 {
		t.Fatalf("B's stamp lost the claim on x: %v", zs.Clock.AppendOffsetEntries(nil))
	}
	z := asRecord(t, zs, Z, 0)
	wantCoords(t, "C gets x@0", feed(t, C, plain(X, 0)), at(X, 0))
	wantCoords(t, "C gets z before x@1", feed(t, C, z))
	wantCoords(t, "C gets x@1", feed(t, C, plain(X, 1)), at(X, 1), at(Z, 0))
}

// TestFanOutOrder: a send to sink B claims the node's earlier send to sink A
// by sequence, so a consumer of both delivers them in send order even when
// B's record arrives first.
func TestFanOutOrder(t *testing.T) {
	A, B := chn(31, 0), chn(32, 0)
	ep := newEnv(t, []headers.Channel{a0}, []headers.TopicID{A.Topic, B.Topic})
	p := ep.node()
	feed(t, p, plain(a0, 0))
	sa := prepare(t, p, A)
	sb := prepare(t, p, B)
	if sa.Seq != 0 || sb.Seq != 0 || !sa.Tagged || sa.Sender != p.Sender() {
		t.Fatalf("tags %+v %+v", sa, sb)
	}
	if v, ok := sb.Clock.Seq(A, p.Sender()); !ok || v != 0 {
		t.Fatalf("stamp to B does not claim the send to A: %v", sb.Clock.AppendSeqEntries(nil))
	}
	if _, ok := sa.Clock.Seq(A, p.Sender()); ok {
		t.Fatal("stamp to A claims its own channel")
	}
	// A second send to A claims B's seq 0 and not itself.
	sa2 := prepare(t, p, A)
	if sa2.Seq != 1 {
		t.Fatalf("second send to A has seq %d", sa2.Seq)
	}
	if v, ok := sa2.Clock.Seq(B, p.Sender()); !ok || v != 0 {
		t.Fatal("stamp to A does not claim the send to B")
	}
	if _, ok := sa2.Clock.Seq(A, p.Sender()); ok {
		t.Fatal("stamp to A claims a sequence on A")
	}

	c := newEnv(t, []headers.Channel{A, B}, nil)
	c.cfg.Stage = "consumer"
	cn := c.node()
	wantCoords(t, "b first", feed(t, cn, asRecord(t, sb, B, 40)))
	wantCoords(t, "then a", feed(t, cn, asRecord(t, sa, A, 70)), at(A, 70), at(B, 40))
}

func TestSendSequencesStartAtZeroAndPersist(t *testing.T) {
	S := chn(31, 2)
	e := newEnv(t, nil, []headers.TopicID{S.Topic})
	n := e.node()
	for i := range int64(3) {
		if s := prepare(t, n, S); s.Seq != i {
			t.Fatalf("send %d got seq %d", i, s.Seq)
		}
	}
	flush(t, n)
	n = e.node()
	if s := prepare(t, n, S); s.Seq != 3 {
		t.Fatalf("after restart seq %d, want 3", s.Seq)
	}
}

func TestStampTerms(t *testing.T) {
	S, S2 := chn(31, 0), chn(31, 1)
	e := newEnv(t, []headers.Channel{a0, b0}, []headers.TopicID{S.Topic})
	e.offs.ends[S.Topic] = []int64{10, 0}
	prev := e.node() // own outputs: a previous incarnation's send, acknowledged at S/0@9
	prepare(t, prev, S)
	if err := prev.Sent(at(S, 9)); err != nil {
		t.Fatal(err)
	}
	flush(t, prev)
	n := e.node()
	other := headers.SenderID{5}
	feed(t, n, plain(a0, 3))
	// b@0 is held (on a@5); its clock still folds in at receive.
	feed(t, n, rec(t, b0, 0, st{offs: []headers.OffsetEntry{off(x0, 77), off(a0, 5), off(c0, 6)}, seqs: []headers.SeqEntry{sq(x0, other, 4)}}))
	s := prepare(t, n, S2)
	want := map[headers.Channel]int64{a0: 5, x0: 77, S: 9, c0: 6} // a: the fold over-claims the frontier (3)
	for ch, o := range want {
		if got, ok := s.Clock.Offset(ch); !ok || got != o {
			t.Errorf("stamp offset on %v = %d,%v want %d", ch, got, ok, o)
		}
	}
	if _, ok := s.Clock.Offset(b0); ok {
		t.Error("stamp claims b, where nothing was delivered")
	}
	if v, ok := s.Clock.Seq(x0, other); !ok || v != 4 {
		t.Error("stamp dropped an unresolved foreign sequence claim")
	}
}

func TestStampNormalisesResolvedForeignSequenceClaims(t *testing.T) {
	S := chn(31, 0)
	n := newEnv(t, []headers.Channel{a0, b0}, []headers.TopicID{S.Topic}).node()
	other := headers.SenderID{5}
	feed(t, n, rec(t, b0, 0, st{seqs: []headers.SeqEntry{sq(a0, other, 2)}}))
	if s := prepare(t, n, S); s.Clock.NumSeqs() != 1 {
		t.Fatalf("unresolved claim missing: %v", s.Clock.AppendSeqEntries(nil))
	}
	wantCoords(t, "a@8", feed(t, n, rec(t, a0, 8, st{sender: &other, seq: 2})), at(a0, 8), at(b0, 0))
	s := prepare(t, n, S)
	if s.Clock.NumSeqs() != 0 {
		t.Fatalf("resolved claim kept: %v", s.Clock.AppendSeqEntries(nil))
	}
	if o, _ := s.Clock.Offset(a0); o < 8 {
		t.Fatalf("resolved claim not covered by an offset claim: a=%d", o)
	}
}
