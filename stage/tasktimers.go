package stage

import "time"

// taskTimers is when a task's next tick (ticks.go) and truncation sweep
// (truncate.go) are due. It outlives the node's rebuilds and goes when the
// task leaves; the session loop owns it.
//
// A task is built when its store is restored and its node built once: the
// first build schedules the first tick and sweep an interval later, and
// from then on a committed step that ticked or swept schedules the next
// one an interval after it, while an aborted step forgets its tick and
// sweep, which the rebuilt node redoes.
type taskTimers struct {
	tick  *tickSpec     // the stage's, nil when it does not tick
	every time.Duration // Config.TruncateInterval; 0: no sweeps

	built  bool // restored and built at least once: processing
	ticks  tickSchedule
	sweeps sweepSchedule
}

// started records the node's first build at now.
func (s *taskTimers) started(now time.Time) {
	if s.built {
		return
	}
	s.built = true
	s.ticks.start(s.tick, now)
	s.sweeps.start(s.every, now)
}

// tickDue reports whether a tick is due at now.
func (s *taskTimers) tickDue(now time.Time) bool {
	return s.tick != nil && s.built && !s.ticks.pending && !now.Before(s.ticks.next)
}

// sweepDue reports whether a sweep is due at now.
func (s *taskTimers) sweepDue(now time.Time) bool {
	return s.every > 0 && s.built && !s.sweeps.swept && !now.Before(s.sweeps.next)
}

// committed schedules the next tick and sweep after a committed step, and
// reports whether it ticked.
func (s *taskTimers) committed() (ticked bool) {
	ticked = s.ticks.committed(s.tick)
	s.sweeps.committed(s.every)
	return ticked
}

// aborted forgets the open step's tick and sweep.
func (s *taskTimers) aborted() {
	s.ticks.aborted()
	s.sweeps.aborted()
}
