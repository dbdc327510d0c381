//go:build !race

package clock_test

import (
	"testing"

	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The stamp path's allocation budget (issue 5: at most 2 per Stamp with a
// 200-entry clock) holds: 0 for a resolver cache hit, 1 for the header
// slice when the clock is unchanged, 2 after a fold (plus the new value).
// Observe of a record whose channels the clock already holds allocates
// nothing.
func TestAllocationBudget(t *testing.T) {
	clk, _ := benchClock(t)
	ctx := testCtx(t)
	rec := &kgo.Record{Topic: "bench"}
	at := headers.Coordinate{Channel: ch(headers.TopicID{1, 3}, 7), Offset: 5000}
	var s headers.Stamp
	s.Clock.CopyFrom(wideClock(benchWidth))
	hs, err := headers.AppendStamp[kgo.RecordHeader](nil, &s, headers.DialectVC)
	if err != nil {
		t.Fatal(err)
	}
	in := &kgo.Record{Topic: "bench", Offset: 7, Headers: hs}
	if err := clk.Observe(in); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		max  float64
		fn   func()
	}{
		{"resolver hit", 0, func() {
			if _, err := clk.Resolver().TopicID(ctx, "bench"); err != nil {
				t.Fatal(err)
			}
		}},
		{"stamp, clock unchanged", 1, func() {
			rec.Headers = nil
			if err := clk.Stamp(ctx, rec); err != nil {
				t.Fatal(err)
			}
		}},
		{"stamp after a fold", 2, func() {
			at.Offset++
			if err := clk.ProducedAt(at); err != nil {
				t.Fatal(err)
			}
			rec.Headers = nil
			if err := clk.Stamp(ctx, rec); err != nil {
				t.Fatal(err)
			}
		}},
		{"observe", 0, func() {
			if err := clk.Observe(in); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		if got := testing.AllocsPerRun(100, tc.fn); got > tc.max {
			t.Errorf("%s: %.1f allocations per call, budget %.0f", tc.name, got, tc.max)
		}
	}
}
