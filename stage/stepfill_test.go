package stage

import (
	"testing"
	"time"
)

// TestFillWait: only a step whose loop poll found its records buffered
// waits longer, and only on its first further poll, for the fetch that poll
// sent; no wait runs past the commit interval.
func TestFillWait(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backlog bool
		polls   int
		left    time.Duration
		want    time.Duration
	}{
		{"backlog, first further poll", true, 1, time.Second, stepFetchWait},
		{"backlog, later polls", true, 2, time.Second, stepPollWait},
		{"loop waited for its records", false, 1, time.Second, stepPollWait},
		{"interval nearly over", true, 1, 2 * time.Millisecond, 2 * time.Millisecond},
		{"interval over", false, 1, -time.Millisecond, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fillWait(tc.backlog, tc.polls, tc.left); got != tc.want {
				t.Fatalf("fillWait(%v, %d, %v) = %v, want %v", tc.backlog, tc.polls, tc.left, got, tc.want)
			}
		})
	}
	if stepFetchWait <= stepPollWait {
		t.Fatalf("stepFetchWait %v is not longer than stepPollWait %v", stepFetchWait, stepPollWait)
	}
}
