package stage

import (
	"strings"
	"testing"
	"time"
)

// The two ways #49 found exactly-once break under rebalance timing, each
// as a fixed schedule of the host simulator. Each fails with its fix
// switched off (go test -tags parsley_sabotage ./stage -run Sabotage).

// secondRevokeInOneStep: i1 owns every partition and is inside a step's
// End when i2 joins (a rebalance takes a partition from it: franz-go's
// revoke callback runs and sets the session's revoked flag), and then i3
// joins (a second partition goes: the callback is swallowed, the flag is
// still set). Inputs flow to i2 and i3; then both leave and everything
// comes back to i1. A host that learns revokes from the callbacks keeps
// the second partition's task, never restores it, and counts on from
// stale state.
func secondRevokeInOneStep(h *simHost) []string {
	i1 := h.start("i1")
	h.settle()
	h.feedN(12)
	h.busy(600)
	h.feedN(6)
	if !h.runUntil(i1, 200, "end") {
		h.t.Fatal("i1 never reached a step's End")
	}
	for _, inst := range []string{"i2", "i3"} {
		m := h.start(inst)
		h.runUntil(m, 20, "poll")
		h.settle(i1)
		h.settle()
	}
	h.feedN(18)
	h.busy(1500)
	for _, m := range h.live() {
		if m.inst != "i1" {
			h.leave(m)
		}
	}
	h.settle()
	h.feedN(12)
	h.busy(800)
	return h.drain()
}

// revokedAndBackDuringReconcile: i1 is inside a reconcile (closing the
// task of a partition i3 took over) when its client goes silent past the
// session timeout: the group drops it, i2 takes its other partition over
// and processes it, then i1's client hears it was removed, rejoins, and
// gets that partition back, all before the reconcile ends. A host that
// absorbs what changed during the reconcile (the mark forget erased)
// keeps the task it had and counts on from stale state.
func revokedAndBackDuringReconcile(h *simHost) []string {
	i1 := h.start("i1")
	h.settle()
	h.feedN(12)
	h.busy(600)
	i3 := h.start("i3")
	h.runUntil(i3, 20, "poll")
	h.settle()
	if !h.runUntil(i1, 200, "close") {
		h.t.Fatal("i1 never closed the task it lost")
	}
	i2 := h.start("i2")
	h.runUntil(i2, 20, "poll")
	// i1's client is silent past the session timeout: the group removes
	// it, and i2 and i3 share its partitions.
	h.s.Advance(h.c.SessionTimeout + time.Second)
	h.c.Tick()
	h.settle(i1)
	h.feedN(12)
	for range 2000 {
		if h.s.Rand().IntN(2) == 0 {
			h.s.Resume(h.pick(i2, i3))
		} else {
			h.settle(i1)
		}
	}
	// i1's client hears it was removed, rejoins, and i2 leaves: i1 gets
	// a partition back, while its loop still sits in the reconcile.
	h.leave(i2)
	h.settle()
	h.settle()
	h.feedN(12)
	h.busy(800)
	return h.drain()
}

// lossSwallowedAcrossGenerations: i1 lost its membership while idle
// (franz-go's lost callback runs and sets the session's lost flag), came
// back and got both partitions, and is opening their tasks — the first
// one's store already restored — when it loses its membership again. The
// second lost callback is swallowed (no End since the first), i2 takes both
// partitions and processes them, leaves, and i1 gets them back in a later
// generation, under a new member ID: that is the only word of the loss. A
// host that continues a holding whatever the member ID keeps the task it
// restored before i2's work, and counts on from stale state.
func lossSwallowedAcrossGenerations(h *simHost) []string {
	i1 := h.start("i1")
	h.settle()
	h.feedN(12)
	h.busy(600)
	// i1 is silent past the session timeout while idle: removed.
	h.runUntil(i1, 50, "poll")
	h.mute(i1)
	h.settle(i1)
	h.unmute(i1)
	// It hears it, its lost callback runs, it rejoins and gets both back,
	// and its loop opens the tasks again: it stops at the second.
	h.settle()
	if !h.runUntil(i1, 200, "open count/1") {
		h.t.Fatal("i1 never reopened task 1")
	}
	for _, j := range i1.jobs {
		for range 200 {
			if j.Done() {
				break
			}
			h.s.Resume(j)
		}
	}
	// Removed again, silently; i2 takes everything over and works.
	i2 := h.start("i2")
	h.runUntil(i2, 20, "poll")
	h.mute(i1)
	h.settle(i1)
	h.feedN(12)
	for range 1500 {
		if h.s.Rand().IntN(3) == 0 {
			h.settle(i1)
		} else {
			h.s.Resume(h.pick(i2))
		}
	}
	h.leave(i2)
	// i1 hears of the second loss (swallowed: no End since the first),
	// rejoins and gets both partitions back.
	h.unmute(i1)
	h.settle()
	h.settle()
	h.feedN(12)
	h.busy(800)
	return h.drain()
}

// lostAndBackBetweenPolls: i1 is between two polls of a step that already
// holds records of partition 0 when its client goes silent past the
// session timeout, hears it was removed, rejoins and gets its partitions
// back: the client fetches partition 0 again from its committed offset,
// and the step's next poll returns records the step already holds. A host
// that feeds them stops Run with a feed-order error.
func lostAndBackBetweenPolls(h *simHost) []string {
	i1 := h.start("i1")
	h.settle()
	h.feedN(8)
	h.busy(600)
	// Records of one key only, so the step's first poll and the one after
	// the move read the same partition.
	h.feedOver(8, 1)
	if !h.runUntil(i1, 400, "fill") {
		h.t.Fatal("i1 never polled twice in a step")
	}
	h.mute(i1)
	h.unmute(i1)
	h.settle()
	h.settle()
	h.feedN(8)
	h.busy(800)
	return h.drain()
}

// commitAfterSwallowedLoss is the run of seed 1153, which the 5,000-seed
// sweep found: a member that lost its membership twice in one step (the
// second lost callback waited for End and was swallowed) went on building
// tasks its ledger still held, and a build consumes nothing: its writes
// carried no offset, so the coordinator checked nothing, and they
// committed while the new owner worked on the same task. The fix checks,
// before End, that every task of the step is still held as it was opened,
// and asks the coordinator before an offsetless commit.
func commitAfterSwallowedLoss(h *simHost) []string { return h.run() }

// simDefects are the fixed schedules, each with the seed and shape it
// runs under.
var simDefects = []struct {
	name string
	seed uint64
	run  func(*simHost) []string
}{
	{"second revoke in one step", 7, secondRevokeInOneStep},
	{"revoked and back during a reconcile", 7, revokedAndBackDuringReconcile},
	{"loss swallowed across generations", 7, lossSwallowedAcrossGenerations},
	{"lost and back between polls", 7, lostAndBackBetweenPolls},
	{"commit after a swallowed loss", 1153, commitAfterSwallowedLoss},
}

// newDefectHost returns the host a fixed schedule runs on: the shape of
// the sweep for a sweep's seed, a small fixed one otherwise.
func newDefectHost(t testing.TB, seed uint64) *simHost {
	if seed > 100 {
		return newSimHost(t, seed, simOptionsFor(seed))
	}
	return newSimHost(t, seed, simOptions{partitions: 3, keys: 6, inputs: 60, maxMembers: 10})
}

func TestHostSimDefects(t *testing.T) {
	for _, tc := range simDefects {
		t.Run(tc.name, func(t *testing.T) {
			h := newDefectHost(t, tc.seed)
			if fs := tc.run(h); len(fs) > 0 {
				t.Log(h.summary())
				t.Errorf("%d findings:\n%s", len(fs), strings.Join(fs[:min(len(fs), 10)], "\n"))
			}
		})
	}
}
