package netsoak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// schedule injects the faults in a seeded order: every kind once in a
// shuffled first round, then kinds drawn at random, with a seeded pause
// between faults. Every fault is counted when it takes effect, never when
// it is merely planned.
type schedule struct {
	o     *Options
	links *Links
	rng   *rand.Rand
	rep   *Report
	say   func(string, ...any)
	insts []*instance
	extra func() error // another component's failure check (the bridge)

	mu      sync.Mutex
	zombies []zombie
	fired   chan *arm
}

// zombie is an instance cut off mid-step, with its evidence counters
// from just before the cut.
type zombie struct {
	in                *instance
	aborts, evidences float64
	fenced            bool
}

func (s *schedule) count(kind string) {
	s.mu.Lock()
	s.rep.Faults[kind]++
	s.mu.Unlock()
}

func (s *schedule) run(ctx context.Context, until time.Time) error {
	s.fired = make(chan *arm, 1)
	order := append([]string(nil), FaultKinds...)
	s.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	for i := 0; time.Now().Before(until); i++ {
		kind := FaultKinds[s.rng.IntN(len(FaultKinds))]
		if i < len(order) {
			kind = order[i]
		}
		in := s.insts[s.rng.IntN(len(s.insts))]
		pause := time.Duration(2000+s.rng.IntN(4000)) * time.Millisecond
		if err := s.wait(ctx, pause); err != nil {
			return err
		}
		if err := s.inject(ctx, kind, in); err != nil {
			return err
		}
		s.checkZombies()
	}
	return nil
}

// wait sleeps, failing early if an instance stopped by itself.
func (s *schedule) wait(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		for _, in := range s.insts {
			if err := in.failed(); err != nil {
				return err
			}
		}
		if s.extra != nil {
			if err := s.extra(); err != nil {
				return err
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(min(250*time.Millisecond, time.Until(end))):
		}
	}
	return nil
}

func (s *schedule) inject(ctx context.Context, kind string, in *instance) error {
	switch kind {
	case "latency":
		ms := 100 + s.rng.IntN(700)
		d := time.Duration(2000+s.rng.IntN(4000)) * time.Millisecond
		remove, err := s.links.Toxic(in.name, "latency", "downstream", fmt.Sprintf(`{"latency":%d,"jitter":%d}`, ms, ms/4))
		if err != nil {
			return err
		}
		s.count(kind)
		s.say("fault latency %dms on %s for %s", ms, in.name, d)
		err = s.wait(ctx, d)
		remove()
		return err
	case "commit-reset":
		return s.armAndWait(ctx, in, &arm{kind: kind, key: keyEndTxn})
	case "zombie", "throttle":
		if err := s.armAndWait(ctx, in, &arm{kind: kind, key: keyProduce}); err != nil {
			return err
		}
		// Let the group settle before the next fault.
		return s.wait(ctx, s.o.SessionTimeout)
	case "restore-drop":
		return s.restoreDrop(ctx, in)
	}
	return fmt.Errorf("netsoak: unknown fault %q", kind)
}

// armAndWait arms a request-triggered fault on in and waits until it has
// fired and run its course (or 15 s pass without the request: the fault
// is then dropped and not counted).
func (s *schedule) armAndWait(ctx context.Context, in *instance, a *arm) error {
	in.armed.Store(a)
	timeout := time.After(15 * time.Second)
	for {
		select {
		case got := <-s.fired:
			if got == a {
				return nil
			}
		case <-timeout:
			if in.armed.CompareAndSwap(a, nil) {
				s.say("fault %s on %s: no request came; skipped", a.kind, in.name)
				return nil
			}
			// It fired just now: wait for it to finish.
			timeout = nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// fire runs an armed fault; the request hook calls it right after the
// awaited request was written.
func (s *schedule) fire(in *instance, a *arm) {
	defer func() { s.fired <- a }()
	switch a.kind {
	case "commit-reset":
		remove, err := s.links.Toxic(in.name, "reset_peer", "downstream", `{"timeout":0}`)
		if err != nil {
			s.say("fault commit-reset on %s: %v", in.name, err)
			return
		}
		s.count(a.kind)
		s.say("fault commit-reset on %s: links reset after its commit request", in.name)
		time.Sleep(300 * time.Millisecond)
		remove()
	case "zombie":
		z := zombie{in: in, aborts: in.aborts(), evidences: float64(in.evidence.n.Load())}
		d := max(s.o.SessionTimeout, s.o.TransactionTimeout) + 3*time.Second
		up, err := s.links.Toxic(in.name, "timeout", "upstream", `{"timeout":0}`)
		if err != nil {
			s.say("fault zombie on %s: %v", in.name, err)
			return
		}
		down, err := s.links.Toxic(in.name, "timeout", "downstream", `{"timeout":0}`)
		if err != nil {
			up()
			s.say("fault zombie on %s: %v", in.name, err)
			return
		}
		s.count(a.kind)
		s.say("fault zombie: %s cut off mid-transaction for %s while it keeps running", in.name, d)
		time.Sleep(d)
		down()
		up()
		s.mu.Lock()
		s.zombies = append(s.zombies, z)
		s.rep.Zombies++
		s.mu.Unlock()
	case "throttle":
		d := s.o.TransactionTimeout + 3*time.Second
		up, err := s.links.Toxic(in.name, "bandwidth", "upstream", `{"rate":1}`)
		if err != nil {
			s.say("fault throttle on %s: %v", in.name, err)
			return
		}
		down, err := s.links.Toxic(in.name, "bandwidth", "downstream", `{"rate":1}`)
		if err != nil {
			up()
			return
		}
		s.count(a.kind)
		s.say("fault throttle: %s at 1 KB/s mid-transaction for %s (transaction timeout %s)", in.name, d, s.o.TransactionTimeout)
		time.Sleep(d)
		down()
		up()
	}
}

// restoreDrop stops an instance, wipes its state, starts it again and
// resets its links while it restores (before it reports ready).
func (s *schedule) restoreDrop(ctx context.Context, in *instance) error {
	if err := in.stop(); err != nil {
		return err
	}
	if err := in.wipe(); err != nil {
		return err
	}
	if err := in.start(); err != nil {
		return err
	}
	// The restore reads the changelog once the instance has its tasks;
	// reset its links repeatedly until it reports ready.
	resets := 0
	deadline := time.Now().Add(30 * time.Second)
	for !in.ready() && time.Now().Before(deadline) {
		remove, err := s.links.Toxic(in.name, "reset_peer", "downstream", `{"timeout":0}`)
		if err != nil {
			return err
		}
		resets++
		if err := s.wait(ctx, 200*time.Millisecond); err != nil {
			remove()
			return err
		}
		remove()
		if err := s.wait(ctx, 800*time.Millisecond); err != nil {
			return err
		}
	}
	if resets > 0 {
		s.count("restore-drop")
	}
	s.say("fault restore-drop: %s wiped and restarted; links reset %d times before it was ready", in.name, resets)
	return nil
}

// checkZombies marks the zombies that show their in-flight transaction
// was refused: an aborted step or a fencing error on that instance since
// the cut.
func (s *schedule) checkZombies() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.zombies {
		z := &s.zombies[i]
		if !z.fenced && (z.in.aborts() > z.aborts || float64(z.in.evidence.n.Load()) > z.evidences) {
			z.fenced = true
		}
	}
}

func (s *schedule) countFenced() {
	s.checkZombies()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rep.ZombiesFenced = 0
	for _, z := range s.zombies {
		if z.fenced {
			s.rep.ZombiesFenced++
		}
	}
}

// heal disarms every pending fault.
func (s *schedule) heal() {
	for _, in := range s.insts {
		in.armed.Store(nil)
	}
}
