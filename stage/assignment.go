package stage

// The assignment: what the group has assigned this member, as franz-go's
// group callbacks report it.

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// assignment is the member's current assignment, the partitions revoked
// since the session loop last reconciled, and a generation counting every
// change. franz-go's group callbacks write it on the client's goroutines
// (OnPartitionsAssigned, OnPartitionsRevoked and OnPartitionsLost, and the
// balancer's standby callback); the session loop reads it. mu guards every
// field, each method holds it for its whole body and none calls out while
// holding it, and what a method returns is a copy. The session loop reads
// the assignment only through these methods.
type assignment struct {
	mu       sync.Mutex
	assigned map[string][]int32
	dropped  map[topicPartition]bool // revoked since the last reconcile
	gen      uint64                  // counts every change
	// revoked: a revoke since the session last ended a transaction
	// (txnEnder.rearmRevoke).
	revoked bool
}

func newAssignment() *assignment {
	return &assignment{assigned: make(map[string][]int32), dropped: make(map[topicPartition]bool)}
}

// onAssigned adds m to the assignment (OnPartitionsAssigned).
func (s *assignment) onAssigned(m map[string][]int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, ps := range m {
		s.assigned[t] = append(s.assigned[t], ps...)
	}
	s.gen++
}

// onRevoked takes m from the assignment and marks it dropped
// (OnPartitionsRevoked and OnPartitionsLost).
func (s *assignment) onRevoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	if len(m) == 0 {
		return // a cooperative rebalance that took nothing from this member
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.revoked = true
	for t, ps := range m {
		for _, p := range ps {
			s.dropped[topicPartition{t, p}] = true
		}
		s.assigned[t] = slices.DeleteFunc(s.assigned[t], func(p int32) bool { return slices.Contains(ps, p) })
		if len(s.assigned[t]) == 0 {
			delete(s.assigned, t)
		}
	}
	s.gen++
}

// dropAll empties the assignment when a session ends and marks all of it
// dropped: the next client starts over, and every task is restored before
// it runs again, whatever the next assignment.
func (s *assignment) dropAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, ps := range s.assigned {
		for _, p := range ps {
			s.dropped[topicPartition{t, p}] = true
		}
	}
	clear(s.assigned)
	s.gen++
}

// bump counts a change that is not the group's own: the standby set the
// leader gave this member changed (standbyHost.changed).
func (s *assignment) bump() {
	s.mu.Lock()
	s.gen++
	s.mu.Unlock()
}

// generation returns the count of changes so far.
func (s *assignment) generation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gen
}

// read returns the generation, a copy of the assignment and of the
// partitions dropped since the last forget.
func (s *assignment) read() (gen uint64, assigned map[string][]int32, dropped map[topicPartition]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	assigned = make(map[string][]int32, len(s.assigned))
	for t, ps := range s.assigned {
		assigned[t] = slices.Clone(ps)
	}
	return s.gen, assigned, maps.Clone(s.dropped)
}

// forget unmarks the dropped partitions a reconcile has handled.
func (s *assignment) forget(dropped map[topicPartition]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for tp := range dropped {
		delete(s.dropped, tp)
	}
}

// takeRevoked reports whether a revoke came since the last call, and
// forgets it.
func (s *assignment) takeRevoked() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := s.revoked
	s.revoked = false
	return seen
}
