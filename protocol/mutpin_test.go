package protocol

import (
	"context"
	"errors"
	"testing"

	"github.com/parsley-go/parsley/headers"
)

// Guards the simulator cannot reach, because a conforming host never
// produces their input (a corrupt store, a feed below a reported
// position). Each was a surviving mutant of .ci/mutation (issue 34); these
// pin the behaviour the guard exists for, so the mutant fails here.

// heldB0 returns an env whose store holds b@3, b@4 and b@5 (indices 0-2),
// all waiting on a@0, flushed.
func heldB0(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, []headers.Channel{a0, b0}, nil)
	n := e.node()
	for _, o := range []int64{3, 4, 5} {
		feed(t, n, rec(t, b0, o, st{offs: []headers.OffsetEntry{off(a0, 0)}}))
	}
	flush(t, n)
	return e
}

// wantKey checks that err is ErrCorruptState naming key k.
func wantKey(t *testing.T, err error, k string) {
	t.Helper()
	wantErr(t, err, ErrCorruptState)
	var pe *Error
	if !errors.As(err, &pe) || pe.Key != k {
		t.Fatalf("error does not name key %q: %v", k, err)
	}
}

func TestFailClosedCorruptQueueNamesEntry(t *testing.T) {
	ck := chanKey(b0)
	for _, tt := range []struct {
		name string
		// corrupt breaks e's store and returns the key the error must name.
		corrupt func(t *testing.T, e *env) string
	}{
		{
			// An entry at the tail index, past what the indices claim: the
			// stray entry is named, not only the indices (init.go's
			// `next >= t`; with `>` the count check refuses it naming the
			// indices instead).
			name: "entry at the tail index",
			corrupt: func(t *testing.T, e *env) string {
				if err := e.store.Put(metaKey(ck), appendInt64(appendInt64(nil, 0), 2)); err != nil {
					t.Fatal(err)
				}
				return entryKey(ck, 2)
			},
		},
		{
			// Two held entries at one offset: held offsets strictly ascend
			// (init.go's `rec.Offset <= prevOff`), or a record would be
			// delivered twice.
			name: "equal held offsets",
			corrupt: func(t *testing.T, e *env) string {
				v, ok, err := e.store.Get(entryKey(ck, 0))
				if err != nil || !ok {
					t.Fatalf("precondition: entry 0 held: %v %v", ok, err)
				}
				if err := e.store.Put(entryKey(ck, 1), v); err != nil {
					t.Fatal(err)
				}
				return entryKey(ck, 1)
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := heldB0(t)
			k := tt.corrupt(t, e)
			_, err := New(context.Background(), e.cfg)
			wantKey(t, err, k)
		})
	}
}

// A record at the frontier that a reported position raised is a replay: a
// host that feeds it breaks H2, and the node drops it rather than deliver
// an offset its frontier already covers (receive.go's `rec.Offset <=
// in.frontier`; accounted covers only what was fed or restored).
func TestRecordAtPositionFrontierIsDropped(t *testing.T) {
	n := newEnv(t, []headers.Channel{a0, b0}, nil).node()
	if _, err := n.PositionAdvance(a0, 6); err != nil {
		t.Fatal(err)
	}
	before := n.Counters().ReplaysSkipped
	for _, o := range []int64{4, 5} {
		wantCoords(t, "below the position", feed(t, n, plain(a0, o)))
	}
	if got := n.Counters().ReplaysSkipped - before; got != 2 {
		t.Fatalf("replays skipped %d, want 2", got)
	}
	wantCoords(t, "at the position", feed(t, n, plain(a0, 6)), at(a0, 6))
}
