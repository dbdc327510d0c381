package sim

import (
	"context"
	"testing"

	"github.com/parsley-go/parsley/headers"
)

// The oracle's own checks, each by a construction that must be flagged.
func TestOracleChecks(t *testing.T) {
	b := NewBroker()
	ta, tb := b.CreateTopic("a", 1), b.CreateTopic("b", 1)
	a, c := ta.Channel(0), tb.Channel(0)
	emit := func(o *Oracle, who int, ch headers.Channel) headers.Coordinate {
		id := o.NewID(who)
		off, err := b.Append(ch, 0, nil, nil, nil, id)
		if err != nil {
			t.Fatal(err)
		}
		co := headers.Coordinate{Channel: ch, Offset: off}
		o.Emit(who, id, co)
		o.Commit(who)
		return co
	}
	o := NewOracle()
	p := o.Actor("p", false)
	n := o.Actor("n", true)
	o.Consume(n, a, 0)
	o.Consume(n, c, 0)
	x := emit(o, p, a) // a@0
	y := emit(o, p, c) // b@0, caused by a@0 (p's prior send)
	z := emit(o, p, c) // b@1

	tests := []struct {
		name  string
		order []headers.Coordinate
		want  ViolationKind
	}{
		{"effect before cause", []headers.Coordinate{y, x, z}, CausalOrder},
		{"channel out of order", []headers.Coordinate{x, z, y}, CausalOrder}, // z's past holds y
		{"duplicate", []headers.Coordinate{x, y, y, z}, Duplicate},
		{"incomplete", []headers.Coordinate{x, y}, Incomplete},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o2 := *o
			o2.violations = nil
			ac := *o.actors[n]
			ac.cur = ac.committed.clone()
			o2.actors = []*actor{o.actors[p], &ac}
			for _, co := range tt.order {
				o2.Deliver(1, co)
			}
			o2.Complete(1, b)
			found := false
			for _, v := range o2.violations {
				found = found || v.Kind == tt.want
			}
			if !found {
				t.Fatalf("want a %v violation, got %v", tt.want, o2.violations)
			}
		})
	}
	t.Run("in order is clean", func(t *testing.T) {
		o2 := *o
		o2.violations = nil
		ac := *o.actors[n]
		o2.actors = []*actor{o.actors[p], &ac}
		for _, co := range []headers.Coordinate{x, y, z} {
			o2.Deliver(1, co)
		}
		o2.Complete(1, b)
		if len(o2.violations) > 0 {
			t.Fatal(o2.violations)
		}
	})
	t.Run("FIFO", func(t *testing.T) {
		o2 := *o
		o2.violations = nil
		ac := *o.actors[n]
		o2.actors = []*actor{o.actors[p], &ac}
		// Below the baseline nothing is judged but order on the channel.
		o2.actors[1].consumes = map[headers.Channel]int64{c: 0}
		o2.Deliver(1, z)
		o2.Deliver(1, y)
		if len(o2.violations) == 0 || o2.violations[0].Kind != FIFO && o2.violations[0].Kind != CausalOrder {
			t.Fatalf("want a FIFO violation, got %v", o2.violations)
		}
	})
	t.Run("abort teaches nothing", func(t *testing.T) {
		o2 := NewOracle()
		q := o2.Actor("q", true)
		r := o2.Actor("r", false)
		o2.Consume(q, a, 0)
		w := emit(o2, r, a)
		o2.Deliver(q, w)
		o2.Abort(q)
		if o2.Delivered(q, w) {
			t.Fatal("an aborted delivery is still recorded")
		}
		o2.Deliver(q, w) // redelivery after the abort is not a duplicate
		if len(o2.violations) > 0 {
			t.Fatal(o2.violations)
		}
	})
}

func TestBroker(t *testing.T) {
	b := NewBroker()
	tp := b.CreateTopic("t", 1)
	ch := tp.Channel(0)
	x := b.Begin()
	if _, err := b.Append(ch, x, nil, []byte("r0"), nil, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, ok := b.Next(ch, 0); ok || b.StableEnd(ch) != 0 {
		t.Fatal("an open transaction's record is fetchable")
	}
	b.Commit(x) // r0@0, marker@1
	y := b.Begin()
	_, _ = b.Append(ch, y, nil, []byte("r2"), nil, 1)
	b.Abort(y) // aborted@2, marker@3
	_, _ = b.Append(ch, 0, nil, []byte("r4"), nil, 2)
	if b.End(ch) != 5 {
		t.Fatalf("end %d, want 5: markers and aborted records take offsets", b.End(ch))
	}
	var got []int64
	for pos := int64(0); ; {
		_, off, ok := b.Next(ch, pos)
		if !ok {
			break
		}
		got = append(got, off)
		pos = off + 1
	}
	if len(got) != 2 || got[0] != 0 || got[1] != 4 {
		t.Fatalf("read_committed fetched %v, want [0 4]", got)
	}
	b.Protect = func(headers.Channel) (int64, bool) { return 2, true }
	if ls := b.AdvanceLogStart(ch, 5); ls != 2 {
		t.Fatalf("retention moved the log start to %d past a subscriber at 2", ls)
	}
	old := tp.ID
	b.DeleteTopic("t")
	if _, ok, _ := b.EndOffsets(context.Background(), old); ok {
		t.Fatal("a deleted topic's ID still exists")
	}
	if nt := b.CreateTopic("t", 1); nt.ID == old {
		t.Fatal("a recreated topic reuses its old ID")
	}
}
