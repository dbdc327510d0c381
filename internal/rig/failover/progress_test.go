package failover

import (
	"slices"
	"testing"
	"time"
)

// The stall is each partition's first arrival after the fault, not its
// latest: a partition that resumed early and kept delivering must not
// inherit the slowest partition's time.
func TestProgressStalls(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 0, 0, 0, 0, time.UTC)
	at := func(ds ...time.Duration) []time.Time {
		var out []time.Time
		for _, d := range ds {
			out = append(out, t0.Add(d))
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		parts [][]time.Time
		per   []time.Duration
		stall time.Duration
	}{
		{"all resumed", [][]time.Time{at(-time.Second, 2*time.Second, 9*time.Second), at(5 * time.Second), at(-2*time.Second, time.Second)},
			[]time.Duration{2 * time.Second, 5 * time.Second, time.Second}, 5 * time.Second},
		{"one not yet", [][]time.Time{at(time.Second), at(-time.Second), at(3 * time.Second)},
			[]time.Duration{time.Second, 0, 3 * time.Second}, 0},
		{"arrival at the fault instant is before it", [][]time.Time{at(0, time.Millisecond)},
			[]time.Duration{time.Millisecond}, time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newProgress(int32(len(tc.parts)))
			p.arrivals[settled] = tc.parts
			if got := p.partitionStalls(settled, t0); !slices.Equal(got, tc.per) {
				t.Errorf("partitionStalls = %v, want %v", got, tc.per)
			}
			if got := p.stallSince(settled, t0); got != tc.stall {
				t.Errorf("stallSince = %v, want %v", got, tc.stall)
			}
		})
	}
}
