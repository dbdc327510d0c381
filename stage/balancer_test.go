package stage

import (
	"fmt"
	"maps"
	"slices"
	"testing"
)

// member builds a memberView subscribed to topics, holding owned at gen.
func member(id string, topics []string, owned map[string][]int32, gen int32) memberView {
	v := memberView{id: id, instance: id, topics: make(map[string]bool), owned: owned, generation: gen}
	for _, t := range topics {
		v.topics[t] = true
	}
	if v.owned == nil {
		v.owned = make(map[string][]int32)
	}
	return v
}

// numbers returns, per member, the partition numbers it got, and fails if
// a member got some topics at p but not every topic it subscribes to, or
// two members got anything at one p.
func numbers(t *testing.T, ms []memberView, topics map[string]int32, plan []map[string][]int32) [][]int32 {
	t.Helper()
	out := make([][]int32, len(plan))
	holder := make(map[int32]int)
	for i, as := range plan {
		seen := make(map[int32]int)
		for tp, ps := range as {
			if !ms[i].topics[tp] {
				t.Errorf("member %s got %s, which it does not subscribe to", ms[i].id, tp)
			}
			for _, p := range ps {
				seen[p]++
				if h, ok := holder[p]; ok && h != i {
					t.Errorf("partition number %d went to %s and %s", p, ms[h].id, ms[i].id)
				}
				holder[p] = i
			}
		}
		for p, n := range seen {
			want := 0
			for tp := range ms[i].topics {
				if p < topics[tp] {
					want++
				}
			}
			if n != want {
				t.Errorf("member %s got %d of its %d topics at partition %d: a task's partitions go all or nothing", ms[i].id, n, want, p)
			}
		}
		out[i] = slices.Sorted(maps.Keys(seen))
	}
	return out
}

// owned turns a round's plan into the holdings the members report at the
// next join.
func ownedAfter(ms []memberView, plan []map[string][]int32, gen int32) []memberView {
	next := slices.Clone(ms)
	for i := range next {
		next[i].owned = plan[i]
		next[i].generation = gen
	}
	return next
}

func TestCoPartitionedPlanFresh(t *testing.T) {
	topics := map[string]int32{"a": 6, "b": 6}
	ms := []memberView{member("m2", []string{"a", "b"}, nil, -1), member("m1", []string{"a", "b"}, nil, -1)}
	got := numbers(t, ms, topics, planCoPartitioned(ms, topics))
	if len(got[0]) != 3 || len(got[1]) != 3 {
		t.Errorf("shares %v, want 3 partition numbers each", got)
	}
	// Stable: the same members holding their plan get the same plan.
	plan := planCoPartitioned(ms, topics)
	again := planCoPartitioned(ownedAfter(ms, plan, 1), topics)
	if fmt.Sprint(again) != fmt.Sprint(plan) {
		t.Errorf("a settled group moved partitions: %v then %v", plan, again)
	}
}

// TestCoPartitionedPlanJoinMovesOnlyItsShare: a third member joining a
// group of two over 6 partition numbers takes exactly 2 — one from each —
// in two rounds: first they are taken from their holders and given to no
// one, then, once revoked, given to the newcomer. Nothing else moves.
func TestCoPartitionedPlanJoinMovesOnlyItsShare(t *testing.T) {
	topics := map[string]int32{"a": 6, "b": 6}
	ab := []string{"a", "b"}
	ms := []memberView{
		member("m1", ab, map[string][]int32{"a": {0, 2, 4}, "b": {0, 2, 4}}, 3),
		member("m2", ab, map[string][]int32{"a": {1, 3, 5}, "b": {1, 3, 5}}, 3),
		member("m3", ab, nil, -1),
	}
	first := planCoPartitioned(ms, topics)
	got := numbers(t, ms, topics, first)
	if len(got[0]) != 2 || len(got[1]) != 2 || len(got[2]) != 0 {
		t.Fatalf("first round %v: want m1 and m2 to keep 2 each and m3 to wait for the revokes", got)
	}
	for i, was := range [][]int32{{0, 2, 4}, {1, 3, 5}} {
		for _, p := range got[i] {
			if !slices.Contains(was, p) {
				t.Errorf("m%d got partition %d it did not hold", i+1, p)
			}
		}
	}
	second := planCoPartitioned(ownedAfter(ms, first, 4), topics)
	got2 := numbers(t, ms, topics, second)
	if len(got2[0]) != 2 || len(got2[1]) != 2 || len(got2[2]) != 2 {
		t.Fatalf("second round %v: want 2 each", got2)
	}
	if !slices.Equal(got2[0], got[0]) || !slices.Equal(got2[1], got[1]) {
		t.Errorf("second round moved a partition number that stayed in the first: %v then %v", got, got2)
	}
}

// TestCoPartitionedPlanMixedVersions: a member of the old version reads
// only a, one of the new reads a and b. Each partition number goes whole
// to one of them; at the old member's numbers b stays unassigned.
func TestCoPartitionedPlanMixedVersions(t *testing.T) {
	topics := map[string]int32{"a": 4, "b": 4}
	ms := []memberView{member("old", []string{"a"}, nil, -1), member("new", []string{"a", "b"}, nil, -1)}
	plan := planCoPartitioned(ms, topics)
	got := numbers(t, ms, topics, plan)
	if len(got[0]) != 2 || len(got[1]) != 2 {
		t.Errorf("shares %v, want 2 each", got)
	}
	if len(plan[0]["b"]) != 0 {
		t.Errorf("the old member got b %v", plan[0]["b"])
	}
}

// TestCoPartitionedPlanWaitsForEveryHolder: when two members report
// holding pieces of one partition number (one stale), nobody gets it
// until both have let go.
func TestCoPartitionedPlanWaitsForEveryHolder(t *testing.T) {
	topics := map[string]int32{"a": 2, "b": 2}
	ab := []string{"a", "b"}
	ms := []memberView{
		member("m1", ab, map[string][]int32{"a": {0}, "b": {0, 1}}, 5),
		member("m2", ab, map[string][]int32{"a": {1}}, 6),
	}
	plan := planCoPartitioned(ms, topics)
	got := numbers(t, ms, topics, plan)
	if len(got[0]) != 1 || got[0][0] != 0 || len(got[1]) != 0 {
		t.Errorf("plan %v: want m1 to keep 0 and 1 to wait for m1's revoke of b[1]", got)
	}
}

// TestRunnableTasks: a task runs only with every source partition
// assigned, and a partition one of its stages cannot run on is not fetched
// for any stage.
func TestRunnableTasks(t *testing.T) {
	h := func(Message[string, string]) ([]Emission, error) { return nil, nil }
	topic := func(n string) *Topic[string, string] { return NewTopic(n, String(), String()) }
	both := On(On(Named("both"), topic("a"), h), topic("b"), h).Into(topic("out")).MustBuild()
	onlyB := On(Named("onlyb"), topic("b"), h).Into(topic("out")).MustBuild()
	onlyC := On(Named("onlyc"), topic("c"), h).Into(topic("out")).MustBuild()
	a, err := New(Config{ApplicationID: "app", InstanceID: "i", Brokers: []string{"x:1"}, StateDir: t.TempDir()}, both, onlyB, onlyC)
	if err != nil {
		t.Fatal(err)
	}
	m := &taskManager{stages: a.stages, topo: &a.topo}
	want, pause := m.runnable(map[string][]int32{"a": {0}, "b": {0, 1}, "c": {1}})
	wantRun := map[taskID]bool{{0, 0}: true, {1, 0}: true, {2, 1}: true}
	if !maps.Equal(want, wantRun) {
		t.Errorf("runnable = %v, want %v", want, wantRun)
	}
	if fmt.Sprint(pause) != "map[b:[1]]" {
		t.Errorf("paused = %v, want b[1] (stage both lacks a[1], so onlyb may not consume b[1] either)", pause)
	}
}

// planCoPartitioned is planOwners' assignment alone.
func planCoPartitioned(members []memberView, topics map[string]int32) []map[string][]int32 {
	out, _, _ := planOwners(members, topics)
	return out
}
