package clock_test

import (
	"testing"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
)

// A transactional producer restores the clock it began a transaction with
// when the transaction aborts: no later stamp names the aborted sends.
func TestRestoreForgetsAbortedSends(t *testing.T) {
	x := headers.Channel{Topic: headers.TopicID{1}, Partition: 0}
	y := headers.Channel{Topic: headers.TopicID{2}, Partition: 0}
	c := clock.New(nil)
	if err := c.ProducedAt(headers.Coordinate{Channel: x, Offset: 3}); err != nil {
		t.Fatal(err)
	}
	began := c.Snapshot()
	for _, at := range []headers.Coordinate{{Channel: x, Offset: 5}, {Channel: y, Offset: 0}} {
		if err := c.ProducedAt(at); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Restore(began); err != nil {
		t.Fatal(err)
	}
	got := c.Snapshot()
	if o, ok := got.Offset(x); !ok || o != 3 {
		t.Errorf("claim on x after the abort = %d %v, want the committed 3", o, ok)
	}
	if o, ok := got.Offset(y); ok {
		t.Errorf("claim on y after the abort = %d, want none", o)
	}
	var bad headers.Clock
	bad.SetOffset(headers.Channel{}, 1)
	if err := c.Restore(&bad); err == nil {
		t.Error("a snapshot naming the zero topic ID was restored")
	}
	if o, _ := c.Snapshot().Offset(x); o != 3 {
		t.Errorf("a refused restore changed the clock: x = %d", o)
	}
}
