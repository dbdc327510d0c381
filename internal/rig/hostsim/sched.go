// Package hostsim is the host simulator's kit: a deterministic scheduler
// of cooperating goroutines and a model of a Kafka cluster (partition logs,
// transactions, one consumer group with cooperative rebalancing) that a
// stage host runs against instead of brokers.
//
// The protocol simulator (sim/) judges the causal node, a pure state
// machine. The host around it is concurrent: franz-go's group callbacks
// arrive on the client's goroutines while the session loop steps,
// restores run on goroutines of their own, and a member can die between
// any two of these. A soak samples those interleavings; this kit generates
// them. Every goroutine of a simulated host is an Actor, and only one
// actor runs at a time: an actor runs until it yields (at a seam where the
// real host would block or could be overtaken: a poll, a step's End, a
// store's close, a restore's read), and the driver then chooses, from a
// seeded source, which actor runs next or what the cluster does meanwhile
// (a member joins, leaves, dies; a rebalance's next phase reaches a
// member; time passes). A seed therefore determines a run, and a run that
// breaks a guarantee replays exactly.
package hostsim

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"time"
)

// Killed is what Yield panics with in an actor that was killed: the actor
// unwinds without running again (Sched.Unwind). An actor's top recovers it
// (Go does).
type Killed struct{ Actor string }

func (k Killed) String() string { return "hostsim: actor " + k.Actor + " killed" }

// Sched runs actors one at a time in an order its seed chooses. Its
// methods are called from the driver's goroutine, except Yield, which an
// actor calls from its own; the hand-over between them is synchronous, so
// nothing in a simulation runs concurrently.
type Sched struct {
	rng    *rand.Rand
	now    time.Time
	actors []*Actor
	cur    *Actor
	back   chan struct{} // an actor hands control back to the driver
	trace  []string      // the last trace lines, for a failing seed's report
	sum    uint64        // a hash over every hand-over: two runs of a seed agree
	steps  int
}

// Actor is one simulated goroutine.
type Actor struct {
	Name   string
	s      *Sched
	wake   chan struct{}
	phase  string // where it yielded last
	done   bool   // its function returned
	killed bool
	panic  any // a panic other than Killed, re-raised to the driver
}

// New returns a scheduler whose choices follow seed and whose clock starts
// at start.
func New(seed uint64, start time.Time) *Sched {
	return &Sched{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), now: start, back: make(chan struct{})}
}

// Rand is the scheduler's seeded source, for the driver's choices.
func (s *Sched) Rand() *rand.Rand { return s.rng }

// Now is the simulated wall clock.
func (s *Sched) Now() time.Time { return s.now }

// Advance moves the clock on by d.
func (s *Sched) Advance(d time.Duration) { s.now = s.now.Add(d) }

// Go registers fn as a new actor. It does not run until the driver resumes
// it.
func (s *Sched) Go(name string, fn func()) *Actor {
	a := &Actor{Name: name, s: s, wake: make(chan struct{})}
	s.actors = append(s.actors, a)
	go func() {
		<-a.wake
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(Killed); !ok {
					a.panic = r
				}
			}
			a.done = true
			s.back <- struct{}{}
		}()
		if a.killed {
			panic(Killed{a.Name})
		}
		fn()
	}()
	return a
}

// Current returns the actor running now, nil on the driver.
func (s *Sched) Current() *Actor { return s.cur }

// Yield parks the running actor at phase and hands control to the driver,
// which resumes it later. Called on the driver itself (no actor runs: a
// callback the driver delivers), it returns at once. A killed actor never
// returns from it: it panics with Killed.
func (s *Sched) Yield(phase string) {
	a := s.cur
	if a == nil {
		return
	}
	a.phase = phase
	s.back <- struct{}{}
	<-a.wake
	if a.killed {
		panic(Killed{a.Name})
	}
}

// Resume runs a until it yields or returns. It re-raises a panic of a's
// that is not Killed.
func (s *Sched) Resume(a *Actor) {
	if a.done || a.killed {
		return
	}
	s.note(a.Name + " @" + a.phase)
	s.cur = a
	a.wake <- struct{}{}
	<-s.back
	s.cur = nil
	if a.panic != nil {
		p := a.panic
		a.panic = nil
		panic(fmt.Sprintf("hostsim: actor %s panicked: %v", a.Name, p))
	}
}

// Runnable returns the actors that may be resumed, in creation order.
func (s *Sched) Runnable() []*Actor {
	var out []*Actor
	for _, a := range s.actors {
		if !a.done && !a.killed {
			out = append(out, a)
		}
	}
	return out
}

// Kill stops a for good: it is never resumed again, as a process killed
// with SIGKILL runs nothing more. Unwind lets its goroutine end.
func (s *Sched) Kill(a *Actor) {
	a.killed = true
	s.note("kill " + a.Name)
}

// Unwind ends the goroutines of the killed actors, which panic Killed out
// of their Yield (running their deferred functions, which may yield again
// and panic again). Call it when the run is over and judged.
func (s *Sched) Unwind() {
	for _, a := range s.actors {
		for a.killed && !a.done {
			s.cur = a
			a.wake <- struct{}{}
			<-s.back
			s.cur = nil
		}
	}
}

// Done reports whether a's function returned.
func (a *Actor) Done() bool { return a.done }

// Killed reports whether a was killed.
func (a *Actor) Killed() bool { return a.killed }

// Phase is where a yielded last.
func (a *Actor) Phase() string { return a.phase }

// Note adds a line to the run's trace.
func (s *Sched) Note(format string, args ...any) { s.note(fmt.Sprintf(format, args...)) }

func (s *Sched) note(line string) {
	s.steps++
	h := fnv.New64a()
	fmt.Fprintf(h, "%d %s %d", s.sum, line, s.now.UnixNano())
	s.sum = h.Sum64()
	s.trace = append(s.trace, line)
	if len(s.trace) > 20000 {
		s.trace = slices.Delete(s.trace, 0, 5000)
	}
}

// Trace returns the run's last trace lines.
func (s *Sched) Trace() []string { return slices.Clone(s.trace) }

// Fingerprint is a hash over everything the run did: two runs of one seed
// have the same.
func (s *Sched) Fingerprint() uint64 { return s.sum }

// Steps counts the hand-overs and notes so far.
func (s *Sched) Steps() int { return s.steps }
