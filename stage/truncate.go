package stage

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

func (t *task) sweepDue(now time.Time) bool {
	return t.app.cfg.TruncateInterval > 0 && t.ops.built && !t.ops.swept && !now.Before(t.ops.nextSweep)
}

// sweepIfDue sweeps a built task whose interval elapsed. It runs at the
// start of a step, before the step's records are fed, so every stamp the
// step writes is already swept.
func (t *task) sweepIfDue(ctx context.Context) {
	if now := t.app.cfg.WallClock(); t.sweepDue(now) {
		t.sweep(ctx, now)
	}
}

func (t *task) sweep(ctx context.Context, now time.Time) {
	if err := t.node.TruncateToLogStarts(ctx); err != nil {
		t.ops.sweepsSkipped++
		t.ops.nextSweep = now.Add(t.app.cfg.TruncateInterval)
		t.app.log.Warn("stage: truncation sweep failed; skipping this cycle",
			"stage", t.st.name, "partition", t.partition, "err", err)
		return
	}
	t.ops.swept, t.ops.sweptAt = true, now
}
