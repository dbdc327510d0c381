package stage

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
)

// upgradeStages returns two versions of stage "s": v1 counts per key over
// topic a; v2 counts over a and b and ticks, each tick emitting "tick-<p>".
func upgradeStages() (v1, v2 *Stage) {
	a, b, out := NewTopic("a", String(), String()), NewTopic("b", String(), String()), NewTopic("out", String(), String())
	count := func(n int64, m Message[string, string]) (Step[int64], error) {
		n++
		return Next(n, out.Send(m.Key, fmt.Sprintf("%s#%d:%s", m.Key, n, m.Value))), nil
	}
	b1 := WithState(Named("s"), Int64(), 0)
	OnFold(b1, a, count)
	v1 = b1.Into(out).MustBuild()
	b2 := WithState(Named("s"), Int64(), 0)
	OnFold(b2, a, count)
	OnFold(b2, b, count)
	TicksFold(b2, 50*time.Millisecond, func(n int64, t Tick) (Step[int64], error) {
		return Next(n+1, out.Send(fmt.Sprintf("tick-%d", t.Partition), strconv.FormatInt(n+1, 10))), nil
	})
	v2 = b2.Into(out).MustBuild()
	return v1, v2
}

// checkOneOwner fails when the records of one group (a changelog
// partition, a tick key) came from producers that interleave: A's records,
// then B's, then A's again. Two owners of one task at once interleave.
func checkOneOwner(t *testing.T, what string, recs []*kgo.Record, group func(*kgo.Record) string) {
	t.Helper()
	runs := make(map[string][]int64) // producer IDs in order, consecutive ones merged
	for _, r := range recs {
		g := group(r)
		if rs := runs[g]; len(rs) == 0 || rs[len(rs)-1] != r.ProducerID {
			runs[g] = append(rs, r.ProducerID)
		}
	}
	for g, rs := range runs {
		seen := make(map[int64]bool)
		for _, id := range rs {
			if seen[id] {
				t.Errorf("%s %s: producers %v interleave: two owners ran one task", what, g, rs)
				break
			}
			seen[id] = true
		}
	}
}

// checkCountsAnyOrder checks, per key, that the outputs number 1..n in
// offset order and carry exactly the input values once each.
func checkCountsAnyOrder(t *testing.T, out []*kgo.Record, inputs map[string][]string) {
	t.Helper()
	got := make(map[string][]string)
	for _, r := range out {
		k := string(r.Key)
		if strings.HasPrefix(k, "tick-") {
			continue
		}
		v := string(r.Value)
		n, val, ok := strings.Cut(strings.TrimPrefix(v, k+"#"), ":")
		if want := strconv.Itoa(len(got[k]) + 1); !ok || n != want {
			t.Errorf("key %s: output %q is count %s, want %s (counted twice, or from scratch)", k, v, n, want)
		}
		got[k] = append(got[k], val)
	}
	for k, vs := range inputs {
		if g, w := slices.Sorted(slices.Values(got[k])), slices.Sorted(slices.Values(vs)); !slices.Equal(g, w) {
			t.Errorf("key %s: processed %q, want each of %q once", k, g, w)
		}
	}
}

// TestRollingUpgradeChangingSources runs two versions of one application
// side by side (#21 defect 1): v1's stage s counts topic a; v2's counts a
// and b and ticks. Instance i1 runs v1, i2 joins with v2, records arrive
// on a and b throughout, then i1 restarts as v2. At every moment one
// instance owns each task: the changelog partitions and the tick outputs
// never interleave two producers, and every count runs 1..n over each
// input exactly once — none counted from scratch by a second owner.
func TestRollingUpgradeChangingSources(t *testing.T) {
	const parts = 4
	e := newEnv(t, broker.Topic{Name: "a", Partitions: parts}, broker.Topic{Name: "b", Partitions: parts}, broker.Topic{Name: "out", Partitions: parts})
	v1, v2 := upgradeStages()
	e.changelogs(parts, v1)
	if err := e.c.CreateTopics(context.Background(), broker.Topic{Name: TickTopic(e.app, "s"), Partitions: parts}); err != nil {
		t.Fatal(err)
	}
	inputs := make(map[string][]string)
	feed := func(topic string, n, from int) int {
		for k, vs := range e.inputs(topic, n, 8, parts, from) {
			inputs[k] = append(inputs[k], vs...)
		}
		return n
	}
	total := 0
	waitOut := func(what string) []*kgo.Record {
		t.Helper()
		var data []*kgo.Record
		waitFor(t, 60*time.Second, what, func() bool {
			data = data[:0]
			for _, r := range e.readCommitted("out", 1<<30, 300*time.Millisecond) {
				if !strings.HasPrefix(string(r.Key), "tick-") {
					data = append(data, r)
				}
			}
			return len(data) >= total
		})
		return data
	}

	i1 := e.start(e.config("i1"), v1)
	total += feed("a", 16, 0)
	waitOut("v1 alone")

	i2 := e.start(e.config("i2"), v2)
	waitFor(t, 30*time.Second, "i2 to run tasks", func() bool { return len(i2.app.Tasks()) > 0 })
	total += feed("a", 16, 100)
	total += feed("b", 16, 200)
	// The b records at i1's partitions wait for the upgrade; the rest
	// are processed in the mixed window.
	waitFor(t, 30*time.Second, "the mixed window to process a", func() bool {
		return len(e.readCommitted("out", 1<<30, 300*time.Millisecond)) >= 32
	})

	if err := i1.stop(); err != nil {
		t.Fatal(err)
	}
	i1 = e.start(e.config("i1"), v2)
	total += feed("a", 8, 300)
	total += feed("b", 8, 400)
	waitOut("every record after the upgrade")
	time.Sleep(500 * time.Millisecond) // a duplicate would arrive late
	if err := i1.stop(); err != nil {
		t.Fatal(err)
	}
	if err := i2.stop(); err != nil {
		t.Fatal(err)
	}

	out := e.readCommitted("out", 1<<30, time.Second)
	checkCountsAnyOrder(t, out, inputs)
	var ticks []*kgo.Record
	for _, r := range out {
		if strings.HasPrefix(string(r.Key), "tick-") {
			ticks = append(ticks, r)
		}
	}
	if len(ticks) == 0 {
		t.Error("no ticks: the new version's ticks never ran")
	}
	checkOneOwner(t, "tick key", ticks, func(r *kgo.Record) string { return string(r.Key) })
	cl := e.readCommitted(ChangelogTopic(e.app, "s"), 1<<30, time.Second)
	checkOneOwner(t, "changelog partition", cl, func(r *kgo.Record) string { return strconv.Itoa(int(r.Partition)) })
}

// TestJoinMovesOnlyItsShare: a third instance joining two that share six
// partitions takes two tasks, one from each; the four tasks that stay are
// never closed or reopened (they keep processing through the rebalance),
// and every record is counted exactly once.
func TestJoinMovesOnlyItsShare(t *testing.T) {
	const parts = 6
	e := newEnv(t, broker.Topic{Name: "in", Partitions: parts}, broker.Topic{Name: "out", Partitions: parts})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := counterStage(in, out)
	e.changelogs(parts, st)
	type opens struct {
		mu sync.Mutex
		n  map[int32]int
	}
	start := func(id string) (*running, *opens) {
		a, err := New(e.config(id), st)
		if err != nil {
			t.Fatal(err)
		}
		o := &opens{n: make(map[int32]int)}
		a.hooks.opened = func(_ string, p int32) { o.mu.Lock(); o.n[p]++; o.mu.Unlock() }
		return e.startApp(a), o
	}
	partitions := func(r *running) []int32 {
		var ps []int32
		for _, ti := range r.app.Tasks() {
			ps = append(ps, ti.Partition)
		}
		return ps
	}
	want := e.inputs("in", 60, 12, parts, 0)
	r1, o1 := start("i1")
	r2, o2 := start("i2")
	waitFor(t, 30*time.Second, "two instances sharing six tasks", func() bool {
		return len(partitions(r1)) == 3 && len(partitions(r2)) == 3
	})
	e.readExactly("out", 60, 30*time.Second)
	before1, before2 := partitions(r1), partitions(r2)

	r3, _ := start("i3")
	waitFor(t, 30*time.Second, "three instances sharing six tasks", func() bool {
		return len(partitions(r1)) == 2 && len(partitions(r2)) == 2 && len(partitions(r3)) == 2
	})
	for i, c := range []struct {
		before, after []int32
		o             *opens
	}{{before1, partitions(r1), o1}, {before2, partitions(r2), o2}} {
		for _, p := range c.after {
			if !slices.Contains(c.before, p) {
				t.Errorf("i%d gained partition %d: only the newcomer should gain", i+1, p)
			}
			c.o.mu.Lock()
			n := c.o.n[p]
			c.o.mu.Unlock()
			if n != 1 {
				t.Errorf("i%d opened task %d %d times: a task that stays is never closed", i+1, p, n)
			}
		}
	}
	more := e.inputs("in", 60, 12, parts, 60)
	for k, vs := range more {
		want[k] = append(want[k], vs...)
	}
	outs := e.readExactly("out", 120, 30*time.Second)
	checkCounts(t, outs, want)
	for _, r := range []*running{r1, r2, r3} {
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStaticRestartMovesNothing: InstanceID is the static group instance
// ID, so an instance that stops stays in the group, and restarting it
// within the session timeout gives it its own tasks back; the other
// instance's tasks never stop. (Kafka skips the rebalance for a static
// follower's rejoin; kfake rebalances whenever the join metadata differs,
// and a cooperative member's carries what it owns, so here a cooperative
// rebalance happens and moves nothing: docs/testing.md.)
func TestStaticRestartMovesNothing(t *testing.T) {
	const parts = 4
	e := newEnv(t, broker.Topic{Name: "in", Partitions: parts}, broker.Topic{Name: "out", Partitions: parts})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := counterStage(in, out)
	e.changelogs(parts, st)
	config := func(id string) Config {
		c := e.config(id)
		c.SessionTimeout = 20 * time.Second
		c.RebalanceTimeout = 5 * time.Second
		return c
	}
	tasks := func(r *running) []TaskInfo { return r.app.Tasks() }
	want := e.inputs("in", 40, 8, parts, 0)
	r1 := e.start(config("i1"), st)
	a2, err := New(config("i2"), st)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	opened := make(map[int32]int)
	a2.hooks.opened = func(_ string, p int32) { mu.Lock(); opened[p]++; mu.Unlock() }
	r2 := e.startApp(a2)
	waitFor(t, 40*time.Second, "two instances sharing four tasks", func() bool {
		return len(tasks(r1)) == 2 && len(tasks(r2)) == 2
	})
	e.readExactly("out", 40, 30*time.Second)
	mine, theirs := tasks(r1), tasks(r2)

	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	groups, err := e.c.Admin().DescribeGroups(ctx, e.app)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(groups[e.app].Members); n != 2 {
		t.Errorf("group has %d members after i1 stopped, want 2: a static member does not leave", n)
	}
	r1 = e.start(config("i1"), st)
	waitFor(t, 15*time.Second, "i1 to run its tasks again", func() bool { return len(tasks(r1)) == 2 })
	if got := tasks(r1); !slices.EqualFunc(got, mine, func(x, y TaskInfo) bool { return x.Partition == y.Partition }) {
		t.Errorf("i1 came back with %v, want its own %v", got, mine)
	}
	more := e.inputs("in", 40, 8, parts, 40)
	for k, vs := range more {
		want[k] = append(want[k], vs...)
	}
	checkCounts(t, e.readExactly("out", 80, 30*time.Second), want)
	if got := tasks(r2); !slices.Equal(got, theirs) {
		t.Errorf("i2 runs %v after i1 restarted, want %v: a static restart moves nothing", got, theirs)
	}
	mu.Lock()
	for _, ti := range theirs {
		if opened[ti.Partition] != 1 {
			t.Errorf("i2 opened task %d %d times: its tasks never stop", ti.Partition, opened[ti.Partition])
		}
	}
	mu.Unlock()
	for _, r := range []*running{r1, r2} {
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
	}
}
