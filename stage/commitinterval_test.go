package stage

import (
	"sync"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
)

// TestStepSpansPolls: a step takes several polls into one transaction,
// up to MaxStepRecords, and a step with nothing more fetched commits at
// once rather than sleeping out its CommitInterval.
func TestStepSpansPolls(t *testing.T) {
	cases := []struct {
		name            string
		maxPoll, budget int
		interval        time.Duration
		records         int
	}{
		// A commit interval far past the test's timeout: a step that
		// waited it out would never show its outputs.
		{name: "light load commits at once", maxPoll: 500, interval: time.Hour, records: 1},
		{name: "budget ends the step", maxPoll: 5, budget: 20, interval: time.Hour, records: 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
			in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
			st := counterStage(in, out)
			e.changelogs(2, st)
			cfg := e.config("i1")
			cfg.MaxPollRecords, cfg.MaxStepRecords, cfg.CommitInterval = tc.maxPoll, tc.budget, tc.interval
			a, err := New(cfg, st)
			if err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			maxPolls, maxRecords := 0, 0
			a.hooks.filled = func(polls, n int) {
				mu.Lock()
				maxPolls, maxRecords = max(maxPolls, polls), max(maxRecords, n)
				mu.Unlock()
			}
			// Produced before the start: the first step finds them all
			// fetched.
			want := e.inputs("in", tc.records, 4, 2, 0)
			r := e.startApp(a)
			defer r.stop()
			checkCounts(t, e.readExactly("out", tc.records, 30*time.Second), want)
			mu.Lock()
			defer mu.Unlock()
			if budget := a.cfg.MaxStepRecords; maxRecords > budget {
				t.Errorf("a step took %d records, over its budget of %d", maxRecords, budget)
			}
			if tc.records > tc.maxPoll && maxPolls < 2 {
				t.Errorf("no step took more than one poll (most: %d) with %d records fetched %d a poll", maxPolls, tc.records, tc.maxPoll)
			}
		})
	}
}
