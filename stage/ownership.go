package stage

// Ownership: what the group has given this member, taken from the group's
// own word at each generation.

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// ownership is the member's holding of topic partitions, as the group
// hands it out: at every sync of a group generation (the balancer's
// ParseSyncAssignment, which franz-go calls for every sync, whatever its
// transaction session passes on), at every loss of the membership, and at
// the end of every session. Each held partition carries the epoch its
// uninterrupted holding began in; a task remembers the epochs it was opened
// under and runs on only while they are unchanged (taskManager.reconcile).
// A partition that left this member and came back, however briefly and
// however the news arrived, holds a new epoch, so the task that ran it
// before is closed and restored again: another member may have processed
// it in between.
//
// The holding continues from one sync to the next only when the member was
// in the group throughout: both syncs name the same member ID. A member the
// coordinator removes (its session expired) is forgotten, and comes back
// under a new ID; while it stays a member, what its joins report it holds
// is given to nobody else (the balancer moves a partition only once its
// holder has revoked it: balancer.go), even across a generation whose sync
// it missed. A sync under another member ID starts every holding over,
// whatever the callbacks said or did not say (franz-go passes a second loss
// between two ends of a transaction on to nobody).
//
// Nothing is remembered as a mark that a later step must clear: a change
// that lands while the session loop reconciles an earlier one is a new
// epoch, and the next reconcile sees it (a mark set twice and cleared once
// forgot the second revoke, #49).
//
// franz-go's group callbacks and the balancer write it on the client's
// goroutines; the session loop reads it. mu guards every field, each method
// holds it for its whole body and calls out to nothing, and what a method
// returns is a copy.
type ownership struct {
	mu sync.Mutex
	// member is the member ID of the last sync, "" when the holding cannot
	// continue into the next one (a new session, a loss).
	member string
	epoch  uint64                    // counts the group's words: syncs, losses, revokes, session ends
	held   map[topicPartition]uint64 // held partition -> the epoch its holding began
	// version counts every change the session loop must reconcile: the
	// holding's, and the standby set's (bump).
	version uint64
	// revoked: franz-go passed on a revoke since the session loop last
	// ended a transaction (txnEnder.rearmRevoke).
	revoked bool

	sab sabotageSet // empty outside verification builds (sabotage.go)
}

func newOwnership() *ownership {
	return &ownership{held: make(map[topicPartition]uint64)}
}

// synced takes in the assignment a sync handed this member, whose member
// ID it names ("": unknown, which continues nothing).
func (o *ownership) synced(member string, assigned map[string][]int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.epoch++
	continues := member != "" && member == o.member
	if o.sab.has(sabIgnoreMembership) {
		continues = true
	}
	held := make(map[topicPartition]uint64)
	if o.sab.has(sabRevokesFromCallbacks) {
		held = o.held
		continues = true
	}
	for t, ps := range assigned {
		for _, p := range ps {
			tp := topicPartition{t, p}
			if since, ok := o.held[tp]; ok && continues {
				held[tp] = since
			} else {
				held[tp] = o.epoch
			}
		}
	}
	o.held, o.member = held, member
	o.version++
}

// onRevoked drops m from the holding (OnPartitionsRevoked). A cooperative
// revoke follows the sync that already dropped m; a member leaving the
// group revokes everything without one.
func (o *ownership) onRevoked(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	if len(m) == 0 {
		return // a cooperative rebalance that took nothing from this member
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.revoked = true
	o.drop(m)
}

// onLost drops m and ends the membership (OnPartitionsLost): the next
// sync continues nothing.
func (o *ownership) onLost(_ context.Context, _ *kgo.Client, m map[string][]int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.revoked = true
	o.member = ""
	o.drop(m)
}

// drop removes m from the holding; o.mu is held.
func (o *ownership) drop(m map[string][]int32) {
	o.epoch++
	for t, ps := range m {
		for _, p := range ps {
			delete(o.held, topicPartition{t, p})
		}
	}
	o.version++
}

// onAssigned makes sure m is held (OnPartitionsAssigned). The sync before
// it has already taken m in; a partition it did not (its generation was
// member ID was unknown to the balancer) starts a holding now.
func (o *ownership) onAssigned(m map[string][]int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	changed := false
	for t, ps := range m {
		for _, p := range ps {
			tp := topicPartition{t, p}
			if _, ok := o.held[tp]; !ok {
				if !changed {
					o.epoch++
					changed = true
				}
				o.held[tp] = o.epoch
			}
		}
	}
	if changed {
		o.version++
	}
}

// ended drops everything when a session ends: the next client starts over,
// and every task is restored before it runs again.
func (o *ownership) ended() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.epoch++
	o.member = ""
	clear(o.held)
	o.revoked = false
	o.version++
}

// bump counts a change that is not the holding's: the standby set the
// leader gave this member changed (standbyHost.changed).
func (o *ownership) bump() {
	o.mu.Lock()
	o.version++
	o.mu.Unlock()
}

// currentVersion returns the count of changes so far.
func (o *ownership) currentVersion() uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.version
}

// read returns the version and a copy of the holding.
func (o *ownership) read() (version uint64, held map[topicPartition]uint64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.version, maps.Clone(o.held)
}

// assigned returns the held partitions by topic, sorted.
func (o *ownership) assigned() map[string][]int32 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return heldByTopic(o.held)
}

// heldByTopic groups a holding's partitions by topic, sorted.
func heldByTopic(held map[topicPartition]uint64) map[string][]int32 {
	out := make(map[string][]int32)
	for tp := range held {
		out[tp.topic] = append(out[tp.topic], tp.partition)
	}
	for _, ps := range out {
		slices.Sort(ps)
	}
	return out
}

// takeRevoked reports whether a revoke came since the last call, and
// forgets it.
func (o *ownership) takeRevoked() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := o.revoked
	o.revoked = false
	return seen
}
