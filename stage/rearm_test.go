package stage

import (
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
)

// TestIdleInstanceHearsEveryRevoke pins txnEnder.rearmRevoke: franz-go's
// GroupTransactSession passes on only the first revoke between two ends of
// a transaction, so an instance that ends none must end an empty one after
// a revoke to hear of the next.
//
// No record is ever produced, so i1 never steps after its tasks' first
// builds: it is idle, deterministically, through both rebalances. i2's
// join revokes three of i1's six tasks (the first revoke, always passed
// on); i3's join revokes one more. Without the re-arm i1 never hears of
// the second and keeps running a task assigned to i3, whatever the timing;
// TestJoinMovesOnlyItsShare, whose instances step on its records and so
// re-arm by chance, catches that only some of the time.
func TestIdleInstanceHearsEveryRevoke(t *testing.T) {
	const parts = 6
	e := newEnv(t, broker.Topic{Name: "in", Partitions: parts}, broker.Topic{Name: "out", Partitions: parts})
	st := counterStage(NewTopic("in", String(), String()), NewTopic("out", String(), String()))
	e.changelogs(parts, st)

	type inst struct {
		r    *running
		idle atomic.Int64 // idle polls so far: the loop has nothing pending
	}
	start := func(id string) *inst {
		a, err := New(e.config(id), st)
		if err != nil {
			t.Fatal(err)
		}
		in := &inst{}
		a.hooks.idle = func() { in.idle.Add(1) }
		in.r = e.startApp(a)
		return in
	}
	tasks := func(in *inst) []int32 {
		var ps []int32
		for _, ti := range in.r.app.Tasks() {
			ps = append(ps, ti.Partition)
		}
		slices.Sort(ps)
		return ps
	}
	// settled waits until the instances own the counts in want, between
	// them every partition once, and each has been idle since (so i1's
	// first builds have ended their transactions before anyone joins).
	settled := func(what string, want []int, ins ...*inst) {
		t.Helper()
		marks := make([]int64, len(ins))
		waitFor(t, 30*time.Second, what, func() bool {
			var all []int32
			for i, in := range ins {
				ps := tasks(in)
				if len(ps) != want[i] {
					marks[i] = in.idle.Load()
					return false
				}
				if ok, _ := in.r.app.Readiness(); !ok {
					marks[i] = in.idle.Load()
					return false
				}
				all = append(all, ps...)
			}
			slices.Sort(all)
			if len(slices.Compact(all)) != parts || len(all) != parts {
				return false
			}
			for i, in := range ins {
				if in.idle.Load() <= marks[i] {
					return false // not idle since it reached its share
				}
			}
			return true
		})
	}

	i1 := start("i1")
	settled("i1 alone with six tasks, idle", []int{6}, i1)
	i2 := start("i2")
	settled("i1 and i2 with three tasks each, idle", []int{3, 3}, i1, i2)
	i3 := start("i3")
	// With the re-arm i1 gives its third task up; without it, i1 keeps
	// three while i3 runs two of its own: seven tasks over six partitions,
	// never settled.
	settled("three instances with two tasks each", []int{2, 2, 2}, i1, i2, i3)
	t.Logf("i1 %v, i2 %v, i3 %v", tasks(i1), tasks(i2), tasks(i3))
}
