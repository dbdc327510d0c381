package stage

// The truncation sweep: each task's schedule for dropping stamp entries
// below the log starts of the topics they name.

import (
	"context"
	"time"
)

// The truncation sweep bounds the stamp-side clocks (carried ancestry and
// the clocks advertised by received records), which otherwise grow with a
// task's transitive upstream: every TruncateInterval a task asks the log
// starts of the topics those clocks name and drops the entries below them.
// Records below a log start are below every present or future consumer's
// baseline, and a deleted topic's claims can never be consumed, so no gate
// can need those entries. Truncation therefore advances exactly as fast as
// retention does.
//
// The sweep runs inside a step, so the truncated clocks reach the store and
// the changelog with it. A failed sweep skips its cycle: it is logged and
// counted (truncation_sweeps_skipped_total), never fails the task.

// sweepSchedule is when a task's next sweep is due. A sweep that ran in
// the open step schedules the next one an interval after it once the step
// commits; an abort forgets it and the rebuilt node sweeps again.
type sweepSchedule struct {
	next  time.Time
	at    time.Time // when the open step's sweep ran
	swept bool      // a sweep ran in the open step
}

// start schedules the first sweep one interval from now.
func (s *sweepSchedule) start(every time.Duration, now time.Time) {
	if every > 0 {
		s.next = now.Add(every)
	}
}

func (s *sweepSchedule) committed(every time.Duration) {
	if s.swept {
		s.next = s.at.Add(every)
		s.swept = false
	}
}

func (s *sweepSchedule) aborted() { s.swept = false }

// sweepIfDue sweeps a built task whose interval elapsed. It runs at the
// start of a step, before the step's records are fed, so every stamp the
// step writes is already swept.
func (t *task) sweepIfDue(ctx context.Context) {
	if now := t.env.clock(); t.timers.sweepDue(now) {
		t.sweep(ctx, now)
	}
}

func (t *task) sweep(ctx context.Context, now time.Time) {
	if err := t.node.TruncateToLogStarts(ctx); err != nil {
		t.counts.sweepsSkipped++
		t.timers.sweeps.next = now.Add(t.env.truncateEvery)
		t.env.log.Warn("stage: truncation sweep failed; skipping this cycle",
			"stage", t.st.name, "partition", t.partition, "err", err)
		return
	}
	t.timers.sweeps.swept, t.timers.sweeps.at = true, now
}
