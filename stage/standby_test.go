package stage

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/state"
	"github.com/parsley-go/parsley/protocol"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// checkStandbys fails unless the placement keeps every rule: no copy on
// a member given the number or still holding it, none on a member that
// asks for none, at most one per member and number, and as many per
// number as the most any member asks for, or as there are eligible
// members.
func checkStandbys(t *testing.T, ms []memberView, owner []int, claimants [][]int, got [][]int32) {
	t.Helper()
	want := 0
	for _, m := range ms {
		want = max(want, m.standbys)
	}
	per := make([]int, len(owner))
	for i, ps := range got {
		if !slices.IsSorted(ps) || len(slices.Compact(slices.Clone(ps))) != len(ps) {
			t.Errorf("member %s: standbys %v not sorted and unique", ms[i].id, ps)
		}
		if len(ps) > 0 && ms[i].standbys == 0 {
			t.Errorf("member %s asks for no standbys and got %v", ms[i].id, ps)
		}
		for _, p := range ps {
			moving := slices.ContainsFunc(claimants[p], func(c int) bool { return c != owner[p] })
			if owner[p] == i && !moving {
				t.Errorf("member %s got a standby of %d, which it owns", ms[i].id, p)
			}
			if slices.Contains(claimants[p], i) {
				t.Errorf("member %s got a standby of %d, which it still holds", ms[i].id, p)
			}
			per[p]++
		}
	}
	for p, n := range per {
		eligible := 0
		for i, m := range ms {
			moving := slices.ContainsFunc(claimants[p], func(c int) bool { return c != owner[p] })
			if m.standbys > 0 && (i != owner[p] || moving) && !slices.Contains(claimants[p], i) {
				eligible++
			}
		}
		if n != min(want, eligible) {
			t.Errorf("partition %d has %d standbys, want %d", p, n, min(want, eligible))
		}
	}
}

// checkKinSpread fails when the copies of one owner's numbers are spread
// unevenly over the other members that ask for copies: the owner's loss
// would then leave a number without a warm member to take it.
func checkKinSpread(t *testing.T, ms []memberView, owner []int, sb [][]int32) {
	t.Helper()
	for o := range ms {
		kin := make([]int, len(ms))
		for i, ps := range sb {
			for _, p := range ps {
				if owner[p] == o {
					kin[i]++
				}
			}
		}
		lo, hi := -1, 0
		for i := range ms {
			if i != o && ms[i].standbys > 0 {
				if lo < 0 || kin[i] < lo {
					lo = kin[i]
				}
				hi = max(hi, kin[i])
			}
		}
		if hi-lo > 1 {
			t.Errorf("copies of %s's numbers per member %v: not spread (standbys %v, owners %v)", ms[o].id, kin, sb, owner)
		}
	}
}

// TestStandbyPlacementRules: over group sizes, partition counts, standby
// counts and a round where numbers move, every placement keeps the rules
// of checkStandbys, and with one copy each the copies spread evenly.
func TestStandbyPlacementRules(t *testing.T) {
	for n := 1; n <= 4; n++ {
		for parts := int32(1); parts <= 7; parts++ {
			for k := 0; k <= 3; k++ {
				t.Run(fmt.Sprintf("members=%d/partitions=%d/standbys=%d", n, parts, k), func(t *testing.T) {
					topics := map[string]int32{"a": parts, "b": parts}
					var ms []memberView
					for i := range n {
						m := member(fmt.Sprintf("m%d", i), []string{"a", "b"}, nil, -1)
						m.standbys = k
						ms = append(ms, m)
					}
					plan, owner, claimants := planOwners(ms, topics)
					sb := planStandbys(ms, owner, claimants)
					checkStandbys(t, ms, owner, claimants, sb)
					if k == 1 && n > 1 {
						lo, hi := int(parts), 0
						for _, ps := range sb {
							lo, hi = min(lo, len(ps)), max(hi, len(ps))
						}
						if hi-lo > 1 {
							t.Errorf("standbys %v: not spread evenly", sb)
						}
					}
					checkKinSpread(t, ms, owner, sb)
					// A member joins: numbers move in two rounds, and the
					// round in between keeps the rules too.
					next := ownedAfter(ms, plan, 1)
					joined := member("m9", []string{"a", "b"}, nil, -1)
					joined.standbys = k
					next = append(next, joined)
					_, owner, claimants = planOwners(next, topics)
					checkStandbys(t, next, owner, claimants, planStandbys(next, owner, claimants))
				})
			}
		}
	}
}

// TestStandbyPlacementSticky: a member that keeps a warm copy of a number
// keeps its standby there; and when a number loses its owner, the member
// with its warm copy becomes the owner, so the task restores only a tail.
func TestStandbyPlacementSticky(t *testing.T) {
	topics := map[string]int32{"a": 4}
	mk := func(id string, owned []int32, warm ...int32) memberView {
		m := member(id, []string{"a"}, map[string][]int32{"a": owned}, 3)
		m.standbys = 1
		m.warm = make(map[int32]bool)
		for _, p := range warm {
			m.warm[p] = true
		}
		return m
	}
	// x owns 0 and 1, y 2 and 3. z keeps the copies of 0 and 2, y of 1,
	// x of 3: placement keeps them where they are.
	ms := []memberView{mk("x", []int32{0, 1}, 3), mk("y", []int32{2, 3}, 1), mk("z", nil, 0, 2)}
	_, owner, claimants := planOwners(ms, topics)
	got := planStandbys(ms, owner, claimants)
	if want := [][]int32{{3}, {1}, {0, 2}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("standbys = %v, want the warm copies kept: %v", got, want)
	}

	// x is gone and w joins. y keeps 2 and 3, its share; of x's 0 and 1,
	// z has the warm copy of 0 and becomes its owner, y has the warm copy
	// of 1 but no room, so 1 goes to w, cold.
	w := mk("w", nil)
	ms = []memberView{mk("y", []int32{2, 3}, 1), mk("z", nil, 0, 2), w}
	_, owner, claimants = planOwners(ms, topics)
	if owner[0] != 1 || owner[1] != 2 {
		t.Errorf("owners = %v, want z for 0 (its warm copy) and w for 1", owner)
	}
	checkStandbys(t, ms, owner, claimants, planStandbys(ms, owner, claimants))

	// Scale-out: x owns all four, and v joins with a warm copy of 3. In
	// the first round 2 and 3 are taken from x and given to nobody; v,
	// their owner-to-be, keeps its copy of 3 (and starts one of 2), so it
	// is still warm in the second round, which gives them to it.
	x := mk("x", []int32{0, 1, 2, 3})
	v := mk("v", nil, 3)
	ms = []memberView{x, v}
	plan, owner, claimants := planOwners(ms, topics)
	sb := planStandbys(ms, owner, claimants)
	if !slices.Equal(owner, []int{0, 0, 1, 1}) || len(plan[1]) != 0 || !slices.Equal(sb[1], []int32{0, 1, 2, 3}) {
		t.Fatalf("first round: owners %v, v assigned %v with standbys %v; want x, x, v, v, nothing yet, copies of all four", owner, plan[1], sb[1])
	}
	v.owned, v.warm = map[string][]int32{}, map[int32]bool{0: true, 1: true, 2: true, 3: true}
	x.owned = plan[0]
	plan, _, _ = planOwners([]memberView{x, v}, topics)
	if !slices.Equal(plan[1]["a"], []int32{2, 3}) {
		t.Errorf("second round: v assigned %v, want [2 3]", plan[1]["a"])
	}
}

// TestStandbyPlacementPrefersWarmOwner: of two members that could each
// take one orphaned number, each takes the one it keeps a warm copy of,
// against the order the plan would otherwise use.
func TestStandbyPlacementPrefersWarmOwner(t *testing.T) {
	topics := map[string]int32{"a": 4}
	b := member("b", []string{"a"}, map[string][]int32{"a": {2}}, 3)
	c := member("c", []string{"a"}, map[string][]int32{"a": {3}}, 3)
	b.warm, c.warm = map[int32]bool{1: true}, map[int32]bool{0: true}
	_, owner, _ := planOwners([]memberView{b, c}, topics)
	if want := []int{1, 0, 0, 1}; !slices.Equal(owner, want) {
		t.Fatalf("owners = %v, want %v (each orphan to its warm member)", owner, want)
	}
}

// TestStandbyAssignmentRoundTrip: what members report in their joins
// reaches the leader's plan, and each member reads its standby partition
// numbers from its own assignment — through the encodings the group
// carries.
func TestStandbyAssignmentRoundTrip(t *testing.T) {
	hosts := []*standbyHost{
		{count: 1, log: testLogger(), warm: []int32{2}},
		{count: 1, log: testLogger()},
		{count: 0, log: testLogger()},
	}
	changed := 0
	for _, h := range hosts {
		h.changed = func() { changed++ }
	}
	var members []kmsg.JoinGroupResponseMember
	for i, h := range hosts {
		m := kmsg.NewJoinGroupResponseMember()
		m.MemberID = fmt.Sprintf("m%d", i)
		m.InstanceID = ptr(fmt.Sprintf("i%d", i))
		var owned map[string][]int32
		if i == 1 {
			owned = map[string][]int32{"in": {0, 1, 2}}
		}
		m.ProtocolMetadata = coPartitioner{host: h}.JoinGroupMetadata([]string{"in"}, owned, 5)
		members = append(members, m)
	}
	mb, _, err := coPartitioner{}.MemberBalancer(members)
	if err != nil {
		t.Fatal(err)
	}
	into, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(map[string]int32{"in": 3})
	if err != nil {
		t.Fatal(err)
	}
	plan := into.IntoSyncAssignment()
	if len(plan) != len(hosts) {
		t.Fatalf("%d assignments for %d members", len(plan), len(hosts))
	}
	var partitions [][]int32
	for i, sa := range plan {
		assigned, err := coPartitioner{host: hosts[i]}.ParseSyncAssignment(sa.MemberAssignment)
		if err != nil {
			t.Fatal(err)
		}
		partitions = append(partitions, assigned["in"])
	}
	// i1 keeps 0 (its share) and gives up 1 and 2, which go to their new
	// owners in the next round: 2 to i0, the member with its warm copy.
	// i0 keeps copies of 0, of 1 (its owner-to-be is i2, and i1 still
	// holds it) and of 2, which it keeps warm until it owns it; i2 asks
	// for none.
	if want := [][]int32{nil, {0}, nil}; !slices.EqualFunc(partitions, want, slices.Equal) {
		t.Fatalf("assigned %v, want %v", partitions, want)
	}
	if got := hosts[0].given; !slices.Equal(got, []int32{0, 1, 2}) {
		t.Errorf("i0 given standbys %v, want [0 1 2]", got)
	}
	if len(hosts[1].given) != 0 || len(hosts[2].given) != 0 {
		t.Errorf("i1 given %v, i2 given %v: want none", hosts[1].given, hosts[2].given)
	}
	if changed != 1 {
		t.Errorf("standby set changed %d times, want once (i0)", changed)
	}
	// Garbage in an assignment's user data gives no standbys, not an
	// error: the member keeps consuming what it was assigned.
	var ca kmsg.ConsumerMemberAssignment
	ca.UserData = []byte{standbyUserDataVersion, 5, 1}
	if _, err := (coPartitioner{host: hosts[0]}).ParseSyncAssignment(ca.AppendTo(nil)); err != nil {
		t.Fatal(err)
	}
	if len(hosts[0].given) != 0 {
		t.Errorf("given %v from garbage, want none", hosts[0].given)
	}
	if _, err := readPartitions([]byte{5, 1}); !errors.Is(err, errStandbyUserData) {
		t.Errorf("readPartitions(garbage) = %v, want errStandbyUserData", err)
	}
}

// TestStandbysNegativeRefused: a negative standby count is a configuration
// error naming the field.
func TestStandbysNegativeRefused(t *testing.T) {
	cfg := Config{ApplicationID: "app", InstanceID: "i", Brokers: []string{"localhost:9092"}, StateDir: t.TempDir(), Standbys: -1}
	_, err := New(cfg, counterStage(NewTopic("in", String(), String()), NewTopic("out", String(), String())))
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "Standbys -1") {
		t.Fatalf("New with Standbys -1 = %v, want ErrInvalidConfig naming Standbys", err)
	}
}

// changelogRecords counts the committed data records of partition 0 of
// the changelog from offset from up to end.
func (e *env) changelogRecords(topic string, from, end int64) int64 {
	e.t.Helper()
	offs := e.changelogDataOffsets(topic, 0)
	lo, _ := slices.BinarySearch(offs, from)
	hi, _ := slices.BinarySearch(offs, end)
	return int64(hi - lo)
}

// changelogDataOffsets returns the offsets of the committed data records
// of partition p of topic, up to its end offset now.
func (e *env) changelogDataOffsets(topic string, p int32) []int64 {
	e.t.Helper()
	ends, err := e.c.Admin().ListEndOffsets(context.Background(), topic)
	if err != nil {
		e.t.Fatal(err)
	}
	end, _ := ends.Lookup(topic, p)
	cl, err := e.c.NewClient(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	var out []int64
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for next := int64(0); next < end.Offset; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			e.t.Fatalf("read %s[%d] from %d: %v", topic, p, next, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Offset < end.Offset && !r.Attrs.IsControl() {
				out = append(out, r.Offset)
			}
			next = r.Offset + 1
		})
	}
	return out
}

func (e *env) endOffset(topic string) int64 {
	e.t.Helper()
	ends, err := e.c.Admin().ListEndOffsets(context.Background(), topic)
	if err != nil {
		e.t.Fatal(err)
	}
	o, _ := ends.Lookup(topic, 0)
	return o.Offset
}

// activation is what the activation restore left in the task's store, and
// what a full restore of the same changelog gives.
type activation struct {
	res        state.Restored
	err        error
	got, full  []protocol.Mutation
	checkpoint int64
}

// TestStandbyActivationRestoresOnlyTheTail: with Standbys 1, the instance
// that does not run a task keeps a copy of its store (reported in Tasks
// and the standby gauges). The copy is frozen at some checkpoint, the task
// goes on writing, and its instance leaves: the task moves to the standby's
// instance, whose restore starts at the copy's checkpoint and reads only
// the changelog records past it — fewer than a full restore reads. What it
// leaves in the store is exactly what a full restore into an empty store
// gives, and processing goes on exactly once.
func TestStandbyActivationRestoresOnlyTheTail(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 1}, broker.Topic{Name: "out", Partitions: 1})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := counterStage(in, out)
	e.changelogs(1, st)
	changelog := ChangelogTopic(e.app, st.Name())
	cfg1 := e.config("i1")
	cfg1.Standbys, cfg1.LeaveOnShutdown = 1, true
	r1 := e.start(cfg1, st)
	const keys = 40
	want := e.inputs("in", keys, keys, 1, 0)
	e.readExactly("out", keys, 30*time.Second)

	cfg2 := e.config("i2")
	cfg2.Standbys = 1
	a2, err := New(cfg2, st)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var last state.TailProgress
	var freeze atomic.Bool
	frozen := make(chan state.TailProgress, 1)
	a2.hooks.standbyProgress = func(ctx context.Context, _ string, _ int32, p state.TailProgress) {
		mu.Lock()
		last = p
		mu.Unlock()
		if freeze.Load() {
			select {
			case frozen <- p:
			default:
			}
			<-ctx.Done() // until the standby stops
		}
	}
	activated := make(chan activation, 1)
	a2.hooks.restored = func(_ string, _ int32, res state.Restored, err error, kv *state.Store) {
		act := activation{res: res, err: err, checkpoint: kv.Checkpoint()}
		if err == nil {
			act.got, act.err = kv.Entries()
		}
		if act.err == nil {
			// The changelog is quiet: the old owner left and the new one
			// has not stepped yet.
			fresh, err := state.Open(context.Background(), filepath.Join(t.TempDir(), "full.db"))
			if err != nil {
				act.err = err
			} else {
				defer fresh.Close()
				newClient := func(opts ...kgo.Opt) (*kgo.Client, error) { return e.c.NewClient(opts...) }
				if _, act.err = state.Restore(context.Background(), e.c.Admin(), newClient, changelog, 0, fresh, time.Now); act.err == nil {
					act.full, act.err = fresh.Entries()
				}
			}
		}
		activated <- act
	}
	r2 := e.startApp(a2)
	end := e.endOffset(changelog)
	waitFor(t, 30*time.Second, "the standby to catch up", func() bool {
		mu.Lock()
		defer mu.Unlock()
		ts := a2.Tasks()
		return last.Applied >= end && len(ts) == 1 && ts[0].Standby && ts[0].Lag == 0
	})
	if ts := r1.app.Tasks(); len(ts) != 1 || ts[0].Standby {
		t.Fatalf("i1 Tasks() = %+v, want count/0 active", ts)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(a2.Collector())
	m := scrape(t, reg)
	if m[metricStandby][taskLabels("count", 0)] != 1 || m[metricStandbyLag][taskLabels("count", 0)] != 0 {
		t.Errorf("i2 %s = %v, %s = %v; want count/0 1 and 0", metricStandby, m[metricStandby], metricStandbyLag, m[metricStandbyLag])
	}
	if _, ok := m[metricRestoring][taskLabels("count", 0)]; ok {
		t.Errorf("i2 reports %s for a task it only keeps a copy of", metricRestoring)
	}

	freeze.Store(true)
	var copyAt state.TailProgress
	select {
	case copyAt = <-frozen:
	case <-time.After(20 * time.Second):
		t.Fatal("the standby did not poll within 20s")
	}
	for k, vs := range e.inputs("in", keys, keys, 1, keys) {
		want[k] = append(want[k], vs...)
	}
	e.readExactly("out", 2*keys, 30*time.Second)
	end = e.endOffset(changelog)
	tail, total := e.changelogRecords(changelog, copyAt.Applied, end), e.changelogRecords(changelog, 0, end)
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}

	var act activation
	select {
	case act = <-activated:
	case <-time.After(30 * time.Second):
		t.Fatal("the task did not move to i2 within 30s")
	}
	if act.err != nil {
		t.Fatal(act.err)
	}
	t.Logf("activation restore %+v; the copy was at %d; changelog: %d records, %d past the copy", act.res, copyAt.Applied, total, tail)
	if act.res.Wiped || act.res.From != copyAt.Applied || act.res.From == 0 {
		t.Errorf("activation restore from %d (wiped %v), want from the standby copy's checkpoint %d", act.res.From, act.res.Wiped, copyAt.Applied)
	}
	if act.res.Records != tail || tail == 0 || tail >= total {
		t.Errorf("activation restore read %d records, want the %d past the copy (of %d in the changelog)", act.res.Records, tail, total)
	}
	if act.checkpoint != end {
		t.Errorf("activated store at %d, want the changelog end %d", act.checkpoint, end)
	}
	if !reflect.DeepEqual(act.got, act.full) || len(act.got) == 0 {
		t.Errorf("activated store differs from a full restore:\n got  %v\n full %v", act.got, act.full)
	}

	for k, vs := range e.inputs("in", keys/2, keys, 1, 2*keys) {
		want[k] = append(want[k], vs...)
	}
	checkCounts(t, e.readExactly("out", 2*keys+keys/2, 30*time.Second), want)
	if ts := a2.Tasks(); len(ts) != 1 || ts[0].Standby {
		t.Errorf("i2 Tasks() = %+v, want count/0 active", ts)
	}
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
}
