package observer

import (
	"fmt"
	"testing"
)

// TestLagLogOnlySustainedLag: a steady lag of a record or two, as on any
// live cluster, never logs; a lag of thousands logs once it is sustained,
// again when it doubles, and once more on catching up.
func TestLagLogOnlySustainedLag(t *testing.T) {
	for _, tc := range []struct {
		lags []int64
		want []string
	}{
		{lags: repeat(1, 38), want: nil}, // the issue: 38 lines in 10 minutes
		{lags: []int64{5000, 0, 5000, 0, 5000, 0}, want: nil},
		{lags: []int64{5000, 4000, 3000, 2000, 0}, want: []string{"catching up 3000", "caught up 0"}},
		{lags: []int64{2000, 2000, 2000, 2500, 3000, 4100, 4200, 0, 0}, want: []string{"catching up 2000", "falling behind 4100", "caught up 0"}},
	} {
		var l lagLog
		var got []string
		for _, lag := range tc.lags {
			if msg, ok := l.observe(lag); ok {
				got = append(got, fmt.Sprintf("%s %d", msg, lag))
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("lags %v logged %q, want %q", tc.lags, got, tc.want)
		}
	}
}

func repeat(v int64, n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = v
	}
	return out
}
