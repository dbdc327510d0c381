package protocol

import (
	"testing"

	"github.com/parsley-go/parsley/headers"
)

// Directed tests for issue 34, item 7: three behaviours a mutation run
// once called equivalent, each pinned here as well as by a simulator
// family (docs/verification.md).

// An input with nothing delivered is not claimed: PrepareSend reads the
// claim of every input, so a fresh input's claim must start at none, and
// a frontier folded past markers without a delivery claims nothing either.
func TestFreshInputIsNotClaimed(t *testing.T) {
	O := chn(9, 0)
	e := newEnv(t, []headers.Channel{a0, b0}, []headers.TopicID{O.Topic})
	n := e.node()
	wantClaim(t, "before any delivery", prepare(t, n, O), b0, -1)
	wantCoords(t, "a@0", feed(t, n, plain(a0, 0)), at(a0, 0))
	s := prepare(t, n, O)
	wantClaim(t, "a, delivered", s, a0, 0)
	wantClaim(t, "b, nothing delivered", s, b0, -1)
	advance(t, n, b0, 3) // markers only: the frontier folds to 2, no record
	wantClaim(t, "b, folded past markers", prepare(t, n, O), b0, -1)
	flush(t, n)
	m := e.node()
	s = prepare(t, m, O)
	wantClaim(t, "after a restart, a", s, a0, 0)
	wantClaim(t, "after a restart, b", s, b0, -1)
}

// Position 0 means "nothing fetched yet": a host may report it, and the
// node accepts it as a no-op, on an empty queue and on a held one, and
// still delivers the record at offset 0 afterwards.
func TestPositionZeroIsAccepted(t *testing.T) {
	e := newEnv(t, []headers.Channel{a0, b0}, nil)
	n := e.node()
	for _, ch := range []headers.Channel{a0, b0} {
		ds, err := n.PositionAdvance(ch, 0)
		if err != nil || len(ds) != 0 {
			t.Fatalf("PositionAdvance(%v, 0) = %v, %v; want accepted, nothing delivered", ch, coords(ds), err)
		}
	}
	for _, s := range n.InputStates() {
		if s.Frontier != -1 || s.Position != 0 {
			t.Fatalf("after position 0 on %v: frontier %d position %d, want -1 and 0", s.Channel, s.Frontier, s.Position)
		}
	}
	// b@0 waits on a@0; a position of 0 on b while it is held changes
	// nothing either.
	wantCoords(t, "b@0 held", feed(t, n, rec(t, b0, 0, st{offs: []headers.OffsetEntry{off(a0, 0)}})))
	if ds, err := n.PositionAdvance(b0, 0); err != nil || len(ds) != 0 {
		t.Fatalf("PositionAdvance(b, 0) while held = %v, %v", coords(ds), err)
	}
	wantCoords(t, "a@0 releases b@0", feed(t, n, plain(a0, 0)), at(a0, 0), at(b0, 0))
}

// Shrink, then regrow, with a sender's claim carried through another
// input: while x is out of scope the node delivers y records claiming S's
// x sends, and when x returns its stamps must keep every such claim its
// kept marks do not resolve (dropping one would leave a real ancestor
// unclaimed), and drop those they do.
func TestRegrowKeepsUnresolvedForeignClaims(t *testing.T) {
	x, y, O := chn(21, 0), chn(22, 0), chn(23, 0)
	S := headers.SenderID{0x5e}
	e := newEnv(t, []headers.Channel{x, y}, []headers.TopicID{O.Topic})
	n := e.node()
	wantCoords(t, "x@0", feed(t, n, rec(t, x, 0, st{sender: &S, seq: 0})), at(x, 0))
	flush(t, n)
	e.cfg.Inputs = []headers.Channel{y}
	n = e.node()
	wantCoords(t, "y@0 claims S's x seq 0", feed(t, n, rec(t, y, 0, st{seqs: []headers.SeqEntry{sq(x, S, 0)}})), at(y, 0))
	wantCoords(t, "y@1 claims S's x seq 2", feed(t, n, rec(t, y, 1, st{seqs: []headers.SeqEntry{sq(x, S, 2)}})), at(y, 1))
	if got, ok := prepare(t, n, O).Clock.Seq(x, S); !ok || got != 2 {
		t.Fatalf("while x is out of scope: claim on S's x = %d (%v), want 2", got, ok)
	}
	flush(t, n)
	e.cfg.Inputs = []headers.Channel{x, y}
	n = e.node()
	if got, ok := prepare(t, n, O).Clock.Seq(x, S); !ok || got != 2 {
		t.Fatalf("after x regrew: claim on S's x = %d (%v), want 2: the kept mark (seq 0) does not resolve it", got, ok)
	}
	// x@1 is S's seq 1, x@2 its seq 2: once delivered, the mark resolves
	// the claim and the stamp claims x@2 by offset instead.
	wantCoords(t, "x@1", feed(t, n, rec(t, x, 1, st{sender: &S, seq: 1})), at(x, 1))
	if got, ok := prepare(t, n, O).Clock.Seq(x, S); !ok || got != 2 {
		t.Fatalf("mark at seq 1: claim on S's x = %d (%v), want 2", got, ok)
	}
	wantCoords(t, "x@2", feed(t, n, rec(t, x, 2, st{sender: &S, seq: 2})), at(x, 2))
	s := prepare(t, n, O)
	if got, ok := s.Clock.Seq(x, S); ok {
		t.Fatalf("mark at seq 2: claim on S's x seq %d kept, want it resolved and dropped", got)
	}
	wantClaim(t, "x by offset", s, x, 2)
}

// Inputs whose topic IDs straddle the sign bit: Java's signed order puts
// 0x80… before 0x10…, byte order the reverse. The gate pairs each input
// with its claim in that order, in both its forms, so a record on either
// waits for its claim on the other.
func TestGateWithSignedTopicIDs(t *testing.T) {
	var hiNeg, lo headers.TopicID
	hiNeg[0], hiNeg[15] = 0x80, 1
	lo[0], lo[15] = 0x10, 2
	var loNeg headers.TopicID // shares lo's high half, sign bit set in the low half
	copy(loNeg[:8], lo[:8])
	loNeg[8], loNeg[15] = 0x80, 3
	for _, walk := range []bool{false, true} {
		for _, pair := range [][2]headers.TopicID{{hiNeg, lo}, {lo, loNeg}} {
			x, y := headers.Channel{Topic: pair[0]}, headers.Channel{Topic: pair[1]}
			e := newEnv(t, []headers.Channel{y, x}, nil)
			e.walk = walk
			n := e.node()
			wantCoords(t, "y@0 waits on x@0", feed(t, n, rec(t, y, 0, st{offs: []headers.OffsetEntry{off(x, 0)}})))
			wantCoords(t, "x@0 releases y@0", feed(t, n, plain(x, 0)), at(x, 0), at(y, 0))
			wantCoords(t, "x@1 waits on y@1", feed(t, n, rec(t, x, 1, st{offs: []headers.OffsetEntry{off(y, 1)}})))
			wantCoords(t, "y@1 releases x@1", feed(t, n, plain(y, 1)), at(y, 1), at(x, 1))
		}
	}
}

// A channel the departing input's advertised clock names joins the inputs
// in the same rescope: it is seeded from that clock, folded into carried
// ancestry first, so the node resumes past what it carries.
func TestDepartingClockSeedsGrowthInSameRescope(t *testing.T) {
	d, x := chn(41, 0), chn(42, 0)
	e := newEnv(t, []headers.Channel{a0, d}, nil)
	n := e.node()
	wantCoords(t, "d@0 claims x@5", feed(t, n, rec(t, d, 0, st{offs: []headers.OffsetEntry{off(x, 5)}})), at(d, 0))
	flush(t, n)
	e.cfg.Inputs = []headers.Channel{a0, x}
	m := e.node()
	var got int64 = -1
	for _, p := range m.ResumePositions() {
		if p.Channel == x {
			got = p.Offset
		}
	}
	if got != 6 {
		t.Fatalf("ResumePositions on x = %d, want 6: the growth seed misses the departing clock", got)
	}
	wantCoords(t, "carried x@5 is a replay", feed(t, m, plain(x, 5)))
	wantCoords(t, "x@6 is new", feed(t, m, plain(x, 6)), at(x, 6))
}
