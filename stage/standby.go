package stage

// Standby tasks (Config.Standbys): other instances keep warm copies of a
// task's store by tailing its changelog, so a task that moves to one of
// them restores only the tail it has not applied.
//
// Placement rides on the co-partitioning balancer, which runs on the group
// leader: each member's join reports how many standbys it runs with and
// the partition numbers it keeps copies of; the leader prefers a warm
// member when a partition number loses its owner, places the copies, and
// puts each member's standby partition numbers in the user data of its
// assignment, so every member learns its part from the same plan. A copy
// is never placed on the number's owner, nor on a member still holding any
// of its partitions (it is moving away from it); while the number moves,
// its owner-to-be may keep one (standbyAllowed).
//
// A task store file has one owner at any moment: the session loop stops a
// standby, and closes its store, before it opens the task on that file.

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parsley-go/parsley/internal/state"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// standbyUserDataVersion versions the join and assignment user data.
const standbyUserDataVersion = 1

// errStandbyUserData: a join or an assignment carries user data this
// build cannot read. The balancer then treats the member as keeping no
// copies and asking for none; a member treats its assignment as giving it
// no standbys.
var errStandbyUserData = errors.New("stage: unreadable standby user data")

// standbyHost is this member's side of standby placement: what its joins
// report and what its assignments give it. The balancer's callbacks run on
// the client's goroutines; the session loop reads given and writes warm.
type standbyHost struct {
	count   int // Config.Standbys
	log     *slog.Logger
	changed func() // the standby set changed: the session loop reconciles

	mu    sync.Mutex
	warm  []int32 // partition numbers with a standby running here, sorted
	given []int32 // standby partition numbers of the latest assignment, sorted
}

// joinUserData encodes the member's join: its standby count and the
// partition numbers it keeps warm copies of.
func (h *standbyHost) joinUserData() []byte {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	b := []byte{standbyUserDataVersion}
	b = binary.AppendUvarint(b, uint64(h.count))
	return appendPartitions(b, h.warm)
}

// readJoinUserData decodes a member's join; a member of an earlier release
// sends none, and any it does not know is read as none.
func readJoinUserData(b []byte) (standbys int, warm map[int32]bool) {
	if len(b) == 0 || b[0] != standbyUserDataVersion {
		return 0, nil
	}
	b = b[1:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > 1<<16 {
		return 0, nil
	}
	ps, err := readPartitions(b[k:])
	if err != nil {
		return 0, nil
	}
	warm = make(map[int32]bool, len(ps))
	for _, p := range ps {
		warm[p] = true
	}
	return int(n), warm
}

func appendPartitions(b []byte, ps []int32) []byte {
	b = binary.AppendUvarint(b, uint64(len(ps)))
	for _, p := range ps {
		b = binary.AppendUvarint(b, uint64(p))
	}
	return b
}

func readPartitions(b []byte) ([]int32, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, fmt.Errorf("%w: partition count", errStandbyUserData)
	}
	b = b[k:]
	ps := make([]int32, 0, n)
	for range n {
		p, k := binary.Uvarint(b)
		if k <= 0 || p > 1<<31-1 {
			return nil, fmt.Errorf("%w: partition number", errStandbyUserData)
		}
		ps = append(ps, int32(p))
		b = b[k:]
	}
	if len(b) > 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errStandbyUserData, len(b))
	}
	return ps, nil
}

// parseAssignment reads a member's assignment: its topic partitions, and
// in the user data its standby partition numbers.
func (h *standbyHost) parseAssignment(b []byte) (map[string][]int32, error) {
	assigned, err := kgo.ParseConsumerSyncAssignment(b)
	if err != nil || h == nil {
		return assigned, err
	}
	var m kmsg.ConsumerMemberAssignment
	if err := m.ReadFrom(b); err != nil {
		return nil, err
	}
	var given []int32
	switch {
	case len(m.UserData) == 0:
		// The leader runs an earlier release, or nobody asks for standbys.
	case m.UserData[0] != standbyUserDataVersion:
		h.log.Warn("stage: assignment carries standby user data of an unknown version; running no standbys", "version", m.UserData[0])
	default:
		if given, err = readPartitions(m.UserData[1:]); err != nil {
			h.log.Warn("stage: assignment carries unreadable standby user data; running no standbys", "err", err)
			given = nil
		}
	}
	slices.Sort(given)
	h.mu.Lock()
	same := slices.Equal(given, h.given)
	h.given = given
	h.mu.Unlock()
	if !same {
		h.log.Debug("stage: standby partition numbers assigned", "partitions", given)
	}
	if !same && h.changed != nil {
		h.changed()
	}
	return assigned, nil
}

// planStandbys places the standby copies of each partition number given
// its planned owner and current claimants (planOwners): as many copies as
// the most any member asks for, on members that ask for some, never on a
// claimant, and never on the owner once it is given the number. In the
// round where a number moves, its owner-to-be may keep (or start) a copy,
// which warms it up: it stays warm for the next round, which gives it the
// number, and the task restores only the tail.
//
// The copies of one owner's numbers go to different members first: when
// the owner is lost, each of its numbers then has a warm member of its
// own, and ownWarm can give every one to its copy within the shares. Then
// a member that already keeps a warm copy of the number keeps it while its
// load stays under an even share; otherwise the least loaded member gets
// it, ties going to the member that follows the owner most closely in the
// balancer's ranking. It returns, per member, its standby partition numbers
// in ascending order.
func planStandbys(members []memberView, owner []int, claimants [][]int) [][]int32 {
	out := make([][]int32, len(members))
	want := 0
	var willing []int
	for i, m := range members {
		want = max(want, m.standbys)
		if m.standbys > 0 {
			willing = append(willing, i)
		}
	}
	if want == 0 || len(owner) == 0 {
		return out
	}
	share := (len(owner)*want + len(willing) - 1) / len(willing)
	load := make([]int, len(members))
	// kin[i][o]: copies member i keeps of numbers member o owns.
	kin := make([][]int, len(members))
	for i := range kin {
		kin[i] = make([]int, len(members))
	}
	pos := make([]int, len(members)) // place in the ranking, of every member
	for i, x := range rankMembers(members) {
		pos[x] = i
	}
	for p, o := range owner {
		var cands []int
		for _, i := range willing {
			if standbyAllowed(i, o, claimants[p]) {
				cands = append(cands, i)
			}
		}
		sticky := func(i int) bool { return members[i].warm[int32(p)] && load[i] < share }
		after := func(i int) int { return (pos[i] - pos[o] + len(members)) % len(members) }
		slices.SortStableFunc(cands, func(x, y int) int {
			if sx, sy := sticky(x), sticky(y); sx != sy {
				if sx {
					return -1
				}
				return 1
			}
			return cmp.Or(cmp.Compare(load[x], load[y]), cmp.Compare(after(x), after(y)))
		})
		slices.SortStableFunc(cands, func(x, y int) int { return cmp.Compare(kin[x][o], kin[y][o]) })
		for _, i := range cands[:min(want, len(cands))] {
			out[i] = append(out[i], int32(p))
			load[i]++
			kin[i][o]++
		}
	}
	return out
}

// standbyAllowed reports whether member i may keep a copy of a number with
// planned owner o and claimants: not while it holds any of the number, and
// not once it owns it, which is when no other member holds any of it.
func standbyAllowed(i, o int, claimants []int) bool {
	if slices.Contains(claimants, i) {
		return false
	}
	moving := slices.ContainsFunc(claimants, func(c int) bool { return c != o })
	return i != o || moving
}

// ownWarm gives each partition number without an owner yet to a member
// that keeps a warm copy of it, when that member's share has room (count
// below base, or at base while extra shares are left), before the owner
// plan spreads the rest: the task then restores only the tail its copy has
// not applied. Any member with room keeps the plan feasible, because the
// shares left always add up to the numbers left. It returns the extra
// shares left.
func ownWarm(members []memberView, rank, owner, count []int, base, extra int) int {
	for p := range owner {
		if owner[p] >= 0 {
			continue
		}
		for _, i := range rank {
			if !members[i].warm[int32(p)] || count[i] > base || count[i] == base && extra == 0 {
				continue
			}
			if count[i] == base {
				extra--
			}
			owner[p] = i
			count[i]++
			break
		}
	}
	return extra
}

// syncPlan is a balance plan whose assignments carry each member's standby
// partition numbers in their user data.
type syncPlan []kmsg.SyncGroupRequestGroupAssignment

func (s syncPlan) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment { return s }

// syncAssignments encodes, per member, its topic partitions and standby
// partition numbers. Every member gets an assignment, if empty.
func syncAssignments(members []*kmsg.JoinGroupResponseMember, assigned []map[string][]int32, standbys [][]int32) syncPlan {
	out := make(syncPlan, 0, len(members))
	for i, m := range members {
		var ca kmsg.ConsumerMemberAssignment
		for _, t := range slices.Sorted(maps.Keys(assigned[i])) {
			at := kmsg.NewConsumerMemberAssignmentTopic()
			at.Topic = t
			at.Partitions = slices.Sorted(slices.Values(assigned[i][t]))
			ca.Topics = append(ca.Topics, at)
		}
		if len(standbys[i]) > 0 {
			ca.UserData = appendPartitions([]byte{standbyUserDataVersion}, standbys[i])
		}
		sa := kmsg.NewSyncGroupRequestGroupAssignment()
		sa.MemberID = m.MemberID
		sa.MemberAssignment = ca.AppendTo(nil)
		out = append(out, sa)
	}
	slices.SortFunc(out, func(x, y kmsg.SyncGroupRequestGroupAssignment) int { return cmp.Compare(x.MemberID, y.MemberID) })
	return out
}

// standbyJob is one standby task: a Tailer on the task's store. Until done
// is closed its goroutine owns the store; the session loop owns the job.
type standbyJob struct {
	kv     *state.Store
	cancel context.CancelFunc
	done   chan struct{}
	err    error

	applied, lag atomic.Int64 // the Tailer's last progress; lag -1 until it caught up once
}

// standbys is the App's standby state, owned by the session loop but for
// host, which the balancer shares.
type standbys struct {
	host  *standbyHost
	jobs  map[taskID]*standbyJob
	retry map[taskID]time.Time // a failed standby starts again after this
}

// standbyRetry is how long a failed standby waits before it starts again.
func (a *App) standbyRetry() time.Duration { return max(5*a.cfg.RetryBackoff, time.Second) }

func (a *App) newStandbyHost() *standbyHost {
	return &standbyHost{count: a.cfg.Standbys, log: a.log, changed: a.asg.bump}
}

// syncStandbys runs a standby for each task of the given partition numbers
// that is not active here (want: the tasks the assignment lets this
// instance run; nil means the running ones), stops the others — before
// their task is opened on the same file — and publishes the partition
// numbers it keeps warm for the next join.
func (a *App) syncStandbys(ctx context.Context, want map[taskID]bool) {
	sb := &a.standby
	sb.host.mu.Lock()
	given := slices.Clone(sb.host.given)
	sb.host.mu.Unlock()
	desired := make(map[taskID]bool)
	for _, p := range given {
		for si, st := range a.stages {
			id := taskID{si, p}
			if p >= a.topics[st.sources[0].topic].partitions || a.tasks[id] != nil || want[id] {
				continue
			}
			desired[id] = true
		}
	}
	for id, j := range sb.jobs {
		if desired[id] {
			continue
		}
		if want[id] {
			a.log.Info("stage: standby copy becomes the task's store", "stage", a.stages[id.stage].name, "partition", id.partition,
				"applied", j.applied.Load(), "lag", j.lag.Load())
		}
		a.stopStandby(id)
	}
	for id := range sb.retry {
		if !desired[id] {
			delete(sb.retry, id)
		}
	}
	now := time.Now()
	var ids []taskID
	for id := range desired {
		if sb.jobs[id] == nil && !now.Before(sb.retry[id]) {
			ids = append(ids, id)
		}
	}
	sortTaskIDs(ids)
	for _, id := range ids {
		// A standby that cannot start costs a slower failover, nothing
		// else: the task itself reports the same problem if it comes here.
		if err := a.startStandby(ctx, id); err != nil {
			a.log.Warn("stage: standby did not start; retrying", "stage", a.stages[id.stage].name, "partition", id.partition, "err", err, "after", a.standbyRetry())
			sb.retry[id] = now.Add(a.standbyRetry())
		}
	}
	warm := make([]int32, 0, len(sb.jobs))
	for id := range sb.jobs {
		if !slices.Contains(warm, id.partition) {
			warm = append(warm, id.partition)
		}
	}
	slices.Sort(warm)
	sb.host.mu.Lock()
	sb.host.warm = warm
	sb.host.mu.Unlock()
}

func (a *App) startStandby(ctx context.Context, id taskID) error {
	st := a.stages[id.stage]
	path := StorePath(a.cfg.StateDir, a.cfg.ApplicationID, st.name, id.partition)
	if err := a.moveLegacyStore(ctx, st, id.partition, path); err != nil {
		return err
	}
	kv, err := state.Open(ctx, path, state.CacheBytes(a.cfg.StateCache))
	if err != nil {
		return fmt.Errorf("stage %q partition %d: standby: %w", st.name, id.partition, err)
	}
	jctx, cancel := context.WithCancel(context.Background())
	j := &standbyJob{kv: kv, cancel: cancel, done: make(chan struct{})}
	j.applied.Store(kv.Checkpoint())
	j.lag.Store(-1)
	tl := &state.Tailer{
		Admin: a.admin,
		NewClient: func(opts ...kgo.Opt) (*kgo.Client, error) {
			return kgo.NewClient(append(a.baseOpts(), opts...)...)
		},
		Topic:     ChangelogTopic(a.cfg.ApplicationID, st.name),
		Partition: id.partition,
		Store:     kv,
		Now:       a.cfg.WallClock,
		Progress: func(ctx context.Context, p state.TailProgress) {
			j.applied.Store(p.Applied)
			j.lag.Store(p.Lag)
			if a.hooks.standbyProgress != nil {
				a.hooks.standbyProgress(ctx, st.name, id.partition, p)
			}
		},
	}
	go func() {
		defer close(j.done)
		_, j.err = tl.Run(jctx)
	}()
	a.standby.jobs[id] = j
	delete(a.standby.retry, id)
	return nil
}

// stopStandby stops a standby and closes its store: the file is free for
// the task.
func (a *App) stopStandby(id taskID) {
	j := a.standby.jobs[id]
	if j == nil {
		return
	}
	j.cancel()
	<-j.done
	if err := j.kv.Close(); err != nil {
		a.log.Warn("stage: close standby store", "stage", a.stages[id.stage].name, "partition", id.partition, "err", err)
	}
	delete(a.standby.jobs, id)
}

// stopStandbys stops every standby (Run returns).
func (a *App) stopStandbys() {
	for id := range a.standby.jobs {
		a.stopStandby(id)
	}
}

// tendStandbys runs on the session loop at every poll: a standby that
// stopped on an error (a recreated changelog, a log start that passed it,
// a broker error) is closed and started again after standbyRetry, which
// restores it the way Restore does (wiping a copy it cannot trust).
func (a *App) tendStandbys(ctx context.Context) {
	sb := &a.standby
	failed := false
	for _, id := range slices.SortedFunc(maps.Keys(sb.jobs), func(x, y taskID) int {
		return cmp.Or(cmp.Compare(x.stage, y.stage), cmp.Compare(x.partition, y.partition))
	}) {
		j := sb.jobs[id]
		select {
		case <-j.done:
		default:
			continue
		}
		a.log.Warn("stage: standby stopped; restarting it", "stage", a.stages[id.stage].name, "partition", id.partition, "err", j.err, "after", a.standbyRetry())
		a.stopStandby(id)
		sb.retry[id] = time.Now().Add(a.standbyRetry())
		failed = true
	}
	due := false
	now := time.Now()
	for _, at := range sb.retry {
		if !now.Before(at) {
			due = true
		}
	}
	if failed || due {
		a.syncStandbys(ctx, nil)
	}
}

// standbySnapshot is a standby as readers see it.
type standbySnapshot struct {
	stage     string
	partition int32
	applied   int64
	lag       int64 // -1 until the first catch-up
}

func (a *App) standbySnapshots() []standbySnapshot {
	var out []standbySnapshot
	for id, j := range a.standby.jobs {
		out = append(out, standbySnapshot{stage: a.stages[id.stage].name, partition: id.partition, applied: j.applied.Load(), lag: j.lag.Load()})
	}
	slices.SortFunc(out, func(x, y standbySnapshot) int {
		return cmp.Or(cmp.Compare(x.stage, y.stage), cmp.Compare(x.partition, y.partition))
	})
	return out
}
