package protocol

import (
	"testing"

	"github.com/parsley-go/parsley/headers"
)

// TestGrowthSkipsHistoryCarriedBySequence: stage S writes x, then d with a
// stamp claiming its x send by sequence only (it cannot know the offset).
// The node consumes d, then drops d and takes x in one rescope. S's x
// records up to the carried sequence are in the node's past: the gate skips
// them (never delivered, never re-entered, reference 05), delivers the
// other writers' records around them in offset order, and resolves
// sequence claims on the skipped records. S's later x records are new and
// delivered.
func TestGrowthSkipsHistoryCarriedBySequence(t *testing.T) {
	d, x, out := chn(41, 0), chn(42, 0), chn(43, 0)
	S := SenderIDFor("app", "S", 0)
	U := SenderIDFor("app", "U", 0)
	e := newEnv(t, []headers.Channel{a0, b0, d}, []headers.TopicID{out.Topic})
	n := e.node()
	wantCoords(t, "d@0", feed(t, n, rec(t, d, 0, st{seqs: []headers.SeqEntry{sq(x, S, 1)}, sender: &S, seq: 0})), at(d, 0))
	flush(t, n)

	e.cfg.Inputs = []headers.Channel{a0, b0, x} // d leaves, x joins: S's x sends 0 and 1 are carried
	m := e.node()
	wantCoords(t, "S's carried x send 0", feed(t, m, rec(t, x, 0, st{sender: &S, seq: 0})))
	// A plain record waiting on b, with S's carried send 1 behind it.
	wantCoords(t, "x@1 held on b@5", feed(t, m, rec(t, x, 1, st{offs: []headers.OffsetEntry{off(b0, 5)}})))
	wantCoords(t, "S's carried x send 1, behind the held head", feed(t, m, rec(t, x, 2, st{sender: &S, seq: 1})))
	// U claims S's x send 1: the skip resolves it.
	wantCoords(t, "a@6 waits on x@1", feed(t, m, rec(t, a0, 6, st{offs: []headers.OffsetEntry{off(x, 1)}, seqs: []headers.SeqEntry{sq(x, S, 1)}, sender: &U, seq: 0})))
	wantCoords(t, "b@5 releases x@1, skips x@2, then a@6", feed(t, m, plain(b0, 5)), at(b0, 5), at(x, 1), at(a0, 6))
	if c := m.Counters(); c.CarriedSkipped != 2 || c.Held != 0 {
		t.Fatalf("counters %+v: want 2 carried records skipped, none held", c)
	}
	s := prepare(t, m, out)
	if o, ok := s.Clock.Offset(x); !ok || o != 2 {
		t.Fatalf("stamp claims x at %d %v, want the skipped record's offset 2", o, ok)
	}
	if q, ok := s.Clock.Seq(x, S); ok {
		t.Fatalf("stamp keeps S's x claim %d, which x@2 resolves by offset", q)
	}
	wantCoords(t, "S's next x send is new", feed(t, m, rec(t, x, 3, st{sender: &S, seq: 2})), at(x, 3))
	flush(t, m)

	// A restart in the same scope resumes past what was skipped; a refetch
	// below it is a replay.
	r := e.node()
	if got := r.ResumePositions(); len(got) != 3 || got[2] != (Position{x, 4}) {
		t.Fatalf("ResumePositions = %v, want x at 4", got)
	}
	wantCoords(t, "refetched x@2", feed(t, r, rec(t, x, 2, st{sender: &S, seq: 1})))
	if c := r.Counters(); c.ReplaysSkipped != 1 || c.CarriedSkipped != 0 {
		t.Fatalf("counters %+v: want the refetch dropped as a replay", c)
	}
}

// TestCarriedSequenceSkipsOnlyItsSender: a carried sequence claim names one
// sender; another sender's records at or below that sequence on the grown
// channel are not the node's past and are delivered.
func TestCarriedSequenceSkipsOnlyItsSender(t *testing.T) {
	d, x := chn(41, 0), chn(42, 0)
	S := SenderIDFor("app", "S", 0)
	V := SenderIDFor("app", "V", 0)
	e := newEnv(t, []headers.Channel{d}, nil)
	n := e.node()
	feed(t, n, rec(t, d, 0, st{seqs: []headers.SeqEntry{sq(x, S, 3)}, sender: &S, seq: 0}))
	flush(t, n)
	e.cfg.Inputs = []headers.Channel{x}
	m := e.node()
	wantCoords(t, "V's x send 0", feed(t, m, rec(t, x, 0, st{sender: &V, seq: 0})), at(x, 0))
	wantCoords(t, "S's carried x send 3", feed(t, m, rec(t, x, 1, st{sender: &S, seq: 3})))
	wantCoords(t, "V's x send 2", feed(t, m, rec(t, x, 2, st{sender: &V, seq: 2})), at(x, 2))
	wantCoords(t, "S's x send 4", feed(t, m, rec(t, x, 3, st{sender: &S, seq: 4})), at(x, 3))
}
