package stage

// The host simulator: the real stage host (App's session loop, the task
// manager, restores, standbys, the transaction ender) run by
// internal/rig/hostsim's scheduler against its model of a cluster, through
// rebalance schedules a seed chooses, and judged by the shared oracle.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/hostsim"
	"github.com/parsley-go/parsley/internal/rig/oracle"
	"github.com/parsley-go/parsley/internal/state"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	simApp   = "hs"
	simStage = "count"
	simIn    = "in"
	simOut   = "out"
)

// simOptions shape one simulated run.
type simOptions struct {
	partitions int32
	keys       int
	inputs     int // records the feeder writes, aborted ones included
	instances  int // members at the start
	maxMembers int // members at most, restarts included
	faults     int // kills, stops, leaves and joins at most
	standbys   int
	steps      int // scheduler steps before the drain
}

// simHost is one simulated run.
type simHost struct {
	t       testing.TB
	seed    uint64
	opt     simOptions
	s       *hostsim.Sched
	c       *hostsim.Cluster
	dir     string
	st      *Stage
	members []*simMember // every incarnation ever started, in order
	nextInc map[string]int

	fed       int                            // inputs written
	want      map[string]bool                // committed inputs
	feedTxn   *hostsim.Txn                   // the feeder's open transaction
	feedRecs  []string                       // the sources in it
	feedKeys  map[string]string              // source -> key
	faults    int                            // faults done
	findings  []string                       // what broke
	sabotage  sabotageSet                    // switched off in every member (verification builds)
	touched   map[*hostsim.Txn]map[int32]int // per open transaction: when it began working on each task
	committed map[int32][]simCommit          // per task: the committed transactions that worked on it
	profile   simProfile
	owner     map[*hostsim.Actor]*simMember // each incarnation's session loop
}

// simMember is one incarnation of an instance: an App and its actors.
type simMember struct {
	h      *simHost
	inst   string
	name   string // inst#n
	app    *App
	actor  *hostsim.Actor
	jobs   []*hostsim.Actor
	client *hostsim.Member // its current session's
	cancel context.CancelFunc
	err    error
	killed bool
	// muteUntil: its client takes no group step before then.
	muteUntil time.Time
}

func newSimHost(t testing.TB, seed uint64, opt simOptions) *simHost {
	s := hostsim.New(seed, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	c := hostsim.NewCluster(s)
	c.TxnTimeout = 20 * time.Second
	c.SessionTimeout = 6 * time.Second
	c.RebalanceTimeout = 6 * time.Second
	for _, n := range []string{simIn, simOut, ChangelogTopic(simApp, simStage)} {
		c.CreateTopic(n, opt.partitions)
	}
	c.NewGroup(simApp)
	h := &simHost{
		t: t, seed: seed, opt: opt, s: s, c: c, dir: simDir(t),
		st:      counter(simStage, NewTopic(simIn, String(), String()), NewTopic(simOut, String(), String())),
		nextInc: make(map[string]int), want: make(map[string]bool), feedKeys: make(map[string]string),
		touched: make(map[*hostsim.Txn]map[int32]int), committed: make(map[int32][]simCommit),
		owner: make(map[*hostsim.Actor]*simMember),
	}
	c.OnCommit = h.judgeCommit
	c.OnTouch = h.judgeTouch
	h.profile = profileFor(seed)
	return h
}

// simDir is a run's state directory: in memory (tmpfs) where the machine
// has one, since a run opens and closes many small stores and their
// durability is not what it tests.
func simDir(t testing.TB) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "parsley-hostsim-")
		if err == nil {
			t.Cleanup(func() { os.RemoveAll(dir) })
			return dir
		}
	}
	return t.TempDir()
}

// start starts a new incarnation of instance inst.
func (h *simHost) start(inst string) *simMember {
	h.nextInc[inst]++
	m := &simMember{h: h, inst: inst, name: fmt.Sprintf("%s#%d", inst, h.nextInc[inst])}
	cfg := Config{
		ApplicationID: simApp, InstanceID: inst, Brokers: []string{"sim:9092"},
		StateDir: filepath.Join(h.dir, inst), Standbys: h.opt.standbys,
		PollInterval: 10 * time.Millisecond, CommitInterval: time.Second,
		MaxPollRecords: 3, MaxStepRecords: 12, DecodeAhead: -1,
		RetryBackoff: 100 * time.Millisecond, TruncateInterval: -1,
		WallClock: h.s.Now,
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	a, err := New(cfg, h.st)
	if err != nil {
		h.t.Fatal(err)
	}
	m.app = a
	a.own.sab = h.sabotage
	a.topo.topics = make(map[string]topicMeta)
	a.topo.idName = make(map[headers.TopicID]string)
	for _, n := range h.c.Topics() {
		id := headers.TopicID(h.c.TopicID(n))
		a.topo.topics[n] = topicMeta{id: id, partitions: h.c.Partitions(n)}
		a.topo.idName[id] = n
	}
	a.cluster = &simCluster{h: h, m: m}
	a.jobs = &simJobs{m: m}
	a.sleep = func(ctx context.Context, _ time.Duration) error {
		h.s.Yield("sleep")
		return ctx.Err()
	}
	a.hooks.phase = func(name string) { h.s.Yield(name) }
	a.hooks.built = func(tm *taskManager) { tm.sab = h.sabotage }
	a.dial = func(context.Context) (groupSession, error) {
		var cl *hostsim.Member
		bal := coPartitioner{host: a.tm.standby.host, synced: func(assigned map[string][]int32) {
			a.own.synced(cl.MemberID(), assigned)
		}}
		cl = h.c.NewMember(inst, simApp+"-"+inst, []string{simIn}, bal)
		cl.OnAssigned = a.onAssigned
		cl.OnRevoked = a.own.onRevoked
		cl.OnLost = a.own.onLost
		m.client = cl
		return simSession{cl, inst}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cancel = cancel
	m.actor = h.s.Go(m.name, func() {
		m.err = a.serve(ctx)
		h.s.Note("%s: Run returned %v", m.name, m.err)
	})
	h.owner[m.actor] = m
	h.members = append(h.members, m)
	h.s.Note("start %s", m.name)
	return m
}

// live returns the incarnations that are neither killed nor stopped.
func (h *simHost) live() []*simMember {
	var out []*simMember
	for _, m := range h.members {
		if !m.killed && !m.actor.Done() {
			out = append(out, m)
		}
	}
	return out
}

// kill stops an incarnation as SIGKILL would: its actors never run again,
// its client sends nothing more; its files stay.
func (h *simHost) kill(m *simMember) {
	m.killed = true
	h.s.Kill(m.actor)
	for _, j := range m.jobs {
		h.s.Kill(j)
	}
	if m.client != nil {
		m.client.Kill()
	}
	h.s.Note("kill -9 %s", m.name)
}

// simSession is a hostsim member as the session loop's groupSession.
type simSession struct {
	*hostsim.Member
	inst string
}

func (s simSession) End(ctx context.Context, commit bool, anchor *offsetAnchor) (bool, error) {
	var tp *hostsim.TP
	var at int64
	if anchor != nil {
		tp = &hostsim.TP{Topic: anchor.topic, Partition: anchor.partition}
		at = anchor.at.Offset
	}
	return s.Member.End(ctx, commit, tp, at, s.inst)
}

// simJobs runs an incarnation's restores and standbys as actors.
type simJobs struct{ m *simMember }

type simJob struct {
	a      *hostsim.Actor
	cancel context.CancelFunc
	s      *hostsim.Sched
}

func (j *simJobs) run(name string, work func(ctx context.Context)) job {
	ctx, cancel := context.WithCancel(context.Background())
	a := j.m.h.s.Go(j.m.name+" "+name, func() { work(ctx) })
	j.m.jobs = append(j.m.jobs, a)
	return &simJob{a: a, cancel: cancel, s: j.m.h.s}
}

func (j *simJob) finished() bool { return j.a.Done() }

func (j *simJob) stop() {
	j.cancel()
	for !j.a.Done() {
		j.s.Yield("stop job")
	}
}

// simCluster answers the host's cluster reads from the model.
type simCluster struct {
	h *simHost
	m *simMember
}

func (c *simCluster) FetchOffsets(_ context.Context, group string) (kadm.OffsetResponses, error) {
	out := make(kadm.OffsetResponses)
	g := c.h.c.Group()
	for _, t := range c.h.c.Topics() {
		for p := range c.h.c.Partitions(t) {
			if o, ok := g.Committed(hostsim.TP{Topic: t, Partition: p}); ok {
				if out[t] == nil {
					out[t] = make(map[int32]kadm.OffsetResponse)
				}
				out[t][p] = kadm.OffsetResponse{Offset: kadm.Offset{Topic: t, Partition: p, At: o.At, LeaderEpoch: -1, Metadata: o.Meta}}
			}
		}
	}
	return out, nil
}

func (c *simCluster) list(end bool, topics ...string) kadm.ListedOffsets {
	out := make(kadm.ListedOffsets)
	for _, t := range topics {
		out[t] = make(map[int32]kadm.ListedOffset)
		for p := range c.h.c.Partitions(t) {
			_, hwm, start := c.h.c.Bounds(hostsim.TP{Topic: t, Partition: p})
			at := start
			if end {
				at = hwm
			}
			out[t][p] = kadm.ListedOffset{Topic: t, Partition: p, Offset: at, LeaderEpoch: -1}
		}
	}
	return out
}

func (c *simCluster) ListStartOffsets(_ context.Context, topics ...string) (kadm.ListedOffsets, error) {
	return c.list(false, topics...), nil
}

func (c *simCluster) ListEndOffsets(_ context.Context, topics ...string) (kadm.ListedOffsets, error) {
	return c.list(true, topics...), nil
}

func (c *simCluster) Metadata(_ context.Context, topics ...string) (kadm.Metadata, error) {
	if len(topics) == 0 {
		topics = c.h.c.Topics()
	}
	md := kadm.Metadata{Cluster: "sim", Topics: make(kadm.TopicDetails)}
	for _, t := range topics {
		td := kadm.TopicDetail{Topic: t, ID: kadm.TopicID(c.h.c.TopicID(t)), Partitions: make(kadm.PartitionDetails)}
		for p := range c.h.c.Partitions(t) {
			td.Partitions[p] = kadm.PartitionDetail{Topic: t, Partition: p}
		}
		md.Topics[t] = td
	}
	return md, nil
}

func (c *simCluster) uncommitted(_ context.Context, _ string, need map[string][]int32) (map[topicPartition]bool, error) {
	out := make(map[topicPartition]bool)
	g := c.h.c.Group()
	for t, ps := range need {
		for _, p := range ps {
			tp := hostsim.TP{Topic: t, Partition: p}
			_, committed := g.Committed(tp)
			out[topicPartition{t, p}] = !committed && !g.PendingOn(tp)
		}
	}
	return out, nil
}

func (c *simCluster) changelog(topic string, p int32) state.Source {
	return &simSource{h: c.h, tp: hostsim.TP{Topic: topic, Partition: p}}
}

func (c *simCluster) fenceAbandoned(context.Context, map[string][]int32) {
	// Half the seeds fence a departed owner's transaction at once, as the
	// stage's fence does; the others leave it to the transaction timeout.
	if c.h.seed%2 == 0 {
		for _, id := range c.h.c.AbortAbandoned(simApp + "-") {
			c.h.s.Note("%s fenced %s", c.m.name, id)
		}
	}
}

func (c *simCluster) leaveGroup(_ context.Context, _, instance string) error {
	c.h.c.Group().LeaveInstance(instance)
	return nil
}

func (c *simCluster) moveLegacy(context.Context, string, string, string) (bool, error) {
	return false, nil
}

// simSource reads a changelog partition of the model, yielding at every
// read as a restore waits for the brokers.
type simSource struct {
	h  *simHost
	tp hostsim.TP
}

func (s *simSource) Topic() string    { return s.tp.Topic }
func (s *simSource) Partition() int32 { return s.tp.Partition }

func (s *simSource) Incarnation(context.Context) (state.Incarnation, error) {
	return state.Incarnation{Cluster: "sim", TopicID: headers.TopicID(s.h.c.TopicID(s.tp.Topic))}, nil
}

func (s *simSource) Bounds(ctx context.Context) (lso, hwm, start int64, err error) {
	s.h.s.Yield("restore: list offsets")
	if err := ctx.Err(); err != nil {
		return 0, 0, 0, err
	}
	lso, hwm, start = s.h.c.Bounds(s.tp)
	return lso, hwm, start, nil
}

func (s *simSource) DeleteRetention(context.Context) (time.Duration, error) {
	return state.DefaultDeleteRetention, nil
}

func (s *simSource) Fetch(ctx context.Context, pos int64) ([]state.Record, int64, int64, error) {
	s.h.s.Yield("restore: fetch")
	if err := ctx.Err(); err != nil {
		return nil, pos, 0, err
	}
	// Eight records a read: a step's changelog writes span several reads.
	recs, next := s.h.c.ReadCommitted(s.tp, pos, 8)
	out := make([]state.Record, len(recs))
	for i, r := range recs {
		out[i] = state.Record{Offset: r.Offset, Key: r.Key, Value: r.Value, Producer: r.Producer, Control: r.Control, Commit: r.Commit}
	}
	_, hwm, _ := s.h.c.Bounds(s.tp)
	return out, next, hwm, nil
}

func (s *simSource) Await(ctx context.Context) error {
	s.h.s.Yield("restore: await")
	return ctx.Err()
}

func (s *simSource) Close() {}

// feed writes one input, in a transaction of the feeder's (committed or
// aborted later) or outside one.
func (h *simHost) feed() {
	r := h.s.Rand()
	key := fmt.Sprintf("k%d", r.IntN(h.opt.keys))
	src := fmt.Sprintf("s%d", h.fed)
	h.fed++
	tp := hostsim.TP{Topic: simIn, Partition: partitionFor([]byte(key), false, h.opt.partitions, 0)}
	h.feedKeys[src] = key
	if r.IntN(3) == 0 {
		h.c.Append(tp, []byte(key), []byte(src))
		h.want[src] = true
		return
	}
	if h.feedTxn == nil {
		_, epoch := h.c.InitProducer("feeder")
		t, err := h.c.BeginTxn("feeder", epoch)
		if err != nil {
			h.t.Fatal(err)
		}
		h.feedTxn = t
	}
	if _, err := h.c.Produce(h.feedTxn, tp, []byte(key), []byte(src), nil, h.s.Now()); err != nil {
		// The transaction timed out and was aborted: what it held is not
		// an input.
		h.feedTxn, h.feedRecs = nil, nil
		h.c.Append(tp, []byte(key), []byte(src))
		h.want[src] = true
		return
	}
	h.feedRecs = append(h.feedRecs, src)
	if r.IntN(3) == 0 || h.fed == h.opt.inputs {
		h.endFeed()
	}
}

func (h *simHost) endFeed() {
	if h.feedTxn == nil {
		return
	}
	commit := h.s.Rand().IntN(5) != 0
	if err := h.c.EndTxn(h.feedTxn, commit); err != nil {
		commit = false // it timed out: aborted
	}
	if commit {
		for _, s := range h.feedRecs {
			h.want[s] = true
		}
	}
	h.feedTxn, h.feedRecs = nil, nil
}

// simTask is a task of the simulated stage, as the cluster sees it: its
// changelog partition, and the offset of its input partition.
func simTask(tp hostsim.TP, offset bool) (int32, bool) {
	switch {
	case offset && tp.Topic == simIn, !offset && tp.Topic == ChangelogTopic(simApp, simStage):
		return tp.Partition, true
	}
	return 0, false
}

// judgeTouch records when a transaction first worked on a task: wrote its
// changelog, or committed an offset of its input.
func (h *simHost) judgeTouch(t *hostsim.Txn, tp hostsim.TP, offset bool) {
	p, ok := simTask(tp, offset)
	if !ok || t.Producer() == "feeder" {
		return
	}
	if h.touched[t] == nil {
		h.touched[t] = make(map[int32]int)
	}
	if _, seen := h.touched[t][p]; !seen {
		h.touched[t][p] = h.s.Steps()
	}
}

// judgeCommit checks, as a transaction commits, that no task is owned
// twice: no other committed transaction worked on one of its tasks after
// it began working on it. A zombie's transaction (its member was removed,
// and has not heard) may stay open beside the new owner's; it aborts, or
// — offsetless, as a task's first build can be — commits before the new
// owner's restore, which waits for it, reads on. Two committed
// transactions that overlap on a task are two owners at once.
func (h *simHost) judgeCommit(t *hostsim.Txn) {
	if t.Producer() == "feeder" {
		return
	}
	h.s.Note("commit by %s (%s, generation %d): offsets %v, wrote %v", t.Producer(), t.Member, t.Gen, t.Offsets, t.Wrote)
	now := h.s.Steps()
	for _, p := range slices.Sorted(maps.Keys(h.touched[t])) {
		since := h.touched[t][p]
		for _, c := range h.committed[p] {
			if c.end > since {
				h.finding("%s committed task %d, worked on since step %d, while %s's committed transaction on it was open until step %d", t.Producer(), p, since, c.producer, c.end)
			}
		}
		h.committed[p] = append(h.committed[p], simCommit{producer: t.Producer(), end: now})
	}
	delete(h.touched, t)
}

type simCommit struct {
	producer string
	end      int
}

// finding records a broken guarantee, in the trace too.
func (h *simHost) finding(format string, args ...any) {
	f := fmt.Sprintf(format, args...)
	h.s.Note("FINDING %s", f)
	h.findings = append(h.findings, f)
}

// actorsOf returns the actors of the live incarnations.
func (h *simHost) runnable() []*hostsim.Actor { return h.s.Runnable() }

// simProfile is how a run's random steps are weighted: some seeds let
// the members run a lot between rebalances, others rebalance in storms
// while every actor stays where it yielded.
type simProfile struct {
	resume, group, feed, time int // weights of the step kinds
	storm                     int // per mille: a storm after an actor yields
	mute                      int // per cent of faults that silence a client
}

func profileFor(seed uint64) simProfile {
	switch seed % 4 {
	case 0:
		return simProfile{resume: 55, group: 20, feed: 10, time: 8, storm: 20, mute: 10}
	case 1:
		return simProfile{resume: 40, group: 35, feed: 12, time: 8, storm: 60, mute: 20}
	case 2:
		return simProfile{resume: 65, group: 15, feed: 10, time: 5, storm: 120, mute: 30}
	default:
		return simProfile{resume: 50, group: 25, feed: 10, time: 10, storm: 200, mute: 40}
	}
}

// clients returns the clients the group steps may move: active, and not
// silenced.
func (h *simHost) clients() []*hostsim.Member {
	var cls []*hostsim.Member
	for _, m := range h.live() {
		if m.client != nil && m.client.Active() && !h.muted(m) {
			cls = append(cls, m.client)
		}
	}
	return cls
}

// muted reports whether m's client is silent now (a long pause, a network
// partition): it takes no group step.
func (h *simHost) muted(m *simMember) bool { return h.s.Now().Before(m.muteUntil) }

// stepOnce takes one random scheduler step: an actor runs (and, now and
// then, a storm of rebalances follows while it sits where it yielded), the
// group moves for one member, an input is fed, time passes, or (faults) a
// member is killed, stopped, started, silenced or leaves.
func (h *simHost) stepOnce(faults bool) {
	r := h.s.Rand()
	p := h.profile
	total := p.resume + p.group + p.feed + p.time + 7
	switch n := r.IntN(total); {
	case n < p.resume:
		if as := h.runnable(); len(as) > 0 {
			a := as[r.IntN(len(as))]
			h.s.Resume(a)
			if !faults {
				break
			}
			// A member sitting in a reconcile or a step's End is where
			// a rebalance does harm: storms are likelier there, and in a
			// reconcile the member's own removal and return likelier
			// still (an excursion).
			chance, away := p.storm, 3
			switch ph := a.Phase(); {
			case strings.HasPrefix(ph, "open "), strings.HasPrefix(ph, "close "):
				chance, away = 4*chance, 2
			case strings.HasPrefix(ph, "end"):
				chance *= 4
			}
			if r.IntN(1000) < chance {
				if m := h.owner[a]; m != nil && a == m.actor && r.IntN(away) == 0 {
					h.excursion(m)
				} else {
					h.storm()
				}
			}
		}
	case n < p.resume+p.group:
		if cls := h.clients(); len(cls) > 0 {
			cls[r.IntN(len(cls))].Step()
		}
	case n < p.resume+p.group+p.feed:
		if h.fed < h.opt.inputs {
			h.feed()
		} else {
			h.endFeed()
		}
	case n < p.resume+p.group+p.feed+p.time:
		h.s.Advance(time.Duration(50+r.IntN(450)) * time.Millisecond)
		h.c.Tick()
	default:
		if faults && h.faults < h.opt.faults {
			h.fault()
		}
	}
}

// storm runs one or two rebalances to the end while every actor stays
// where it yielded: a membership change (while the fault budget lasts)
// or a forced rejoin, then group steps only until the group is stable.
func (h *simHost) storm() {
	r := h.s.Rand()
	n := 1 + r.IntN(2)
	h.s.Note("storm of %d", n)
	for range n {
		if h.faults < h.opt.faults {
			h.fault()
		} else if cls := h.clients(); len(cls) > 0 {
			cls[r.IntN(len(cls))].ForceRebalance()
		}
		var muted []*simMember
		for _, m := range h.live() {
			if h.muted(m) {
				muted = append(muted, m)
			}
		}
		h.settle(muted...)
	}
}

// excursion lets the world move on while m's session loop sits where it
// yielded: its client falls silent past the session timeout (the group
// removes it), the other members run and take its tasks over, and then it
// speaks again, hears it was removed and rejoins: all before its loop
// takes another step.
func (h *simHost) excursion(m *simMember) {
	r := h.s.Rand()
	h.s.Note("excursion while %s sits at %q", m.name, m.actor.Phase())
	h.mute(m)
	for range 100 + r.IntN(500) {
		switch n := r.IntN(10); {
		case n < 6:
			var as []*hostsim.Actor
			for _, a := range h.runnable() {
				if a != m.actor {
					as = append(as, a)
				}
			}
			if len(as) > 0 {
				h.s.Resume(as[r.IntN(len(as))])
			}
		case n < 9:
			h.settle(m)
		default:
			if h.fed < h.opt.inputs {
				h.feed()
			}
		}
	}
	h.unmute(m)
	h.settle()
}

// fault kills, stops, restarts, adds, silences or removes a member. A
// member it starts runs until its client exists.
func (h *simHost) fault() {
	r := h.s.Rand()
	live := h.live()
	switch n := r.IntN(100); {
	case n < h.profile.mute && len(live) > 1:
		// The client goes silent past the session timeout: the group
		// removes it, and it hears so when it speaks again.
		m := live[r.IntN(len(live))]
		m.muteUntil = h.s.Now().Add(h.c.SessionTimeout + time.Duration(r.IntN(3000))*time.Millisecond)
		h.s.Note("silence %s", m.name)
		h.s.Advance(h.c.SessionTimeout + time.Second)
		h.c.Tick()
	case n < 40 && len(live) > 1:
		m := live[r.IntN(len(live))]
		h.kill(m)
		if r.IntN(2) == 0 {
			h.s.Advance(h.c.SessionTimeout + time.Second)
			h.c.Tick()
		}
	case n < 55 && len(live) > 1:
		m := live[r.IntN(len(live))]
		h.s.Note("stop %s", m.name)
		m.cancel()
	case n < 70 && len(live) > 1:
		m := live[r.IntN(len(live))]
		h.s.Note("stop and leave %s", m.name)
		m.app.cfg.LeaveOnShutdown = true
		m.cancel()
	default:
		// Restart an instance that is down, or start a new one.
		var m *simMember
		down := h.down()
		if len(down) > 0 && len(h.members) < h.opt.maxMembers {
			m = h.start(down[r.IntN(len(down))])
		} else if len(h.nextInc) < h.opt.instances+2 && len(h.members) < h.opt.maxMembers {
			m = h.start(fmt.Sprintf("i%d", len(h.nextInc)+1))
		}
		if m == nil {
			return
		}
		h.runUntil(m, 10, "poll")
	}
	h.faults++
}

// down returns the instances with no live incarnation, sorted.
func (h *simHost) down() []string {
	up := make(map[string]bool)
	for _, m := range h.live() {
		up[m.inst] = true
	}
	var out []string
	for _, inst := range slices.Sorted(maps.Keys(h.nextInc)) {
		if !up[inst] {
			out = append(out, inst)
		}
	}
	return out
}

// outputs reads the committed outputs back.
func (h *simHost) outputs() []simOutput {
	var out []simOutput
	for p := range h.opt.partitions {
		for _, r := range h.c.Committed(hostsim.TP{Topic: simOut, Partition: p}) {
			o := simOutput{at: fmt.Sprintf("%s[%d]@%d", simOut, p, r.Offset), key: string(r.Key)}
			// key#n:src
			v := string(r.Value)
			if i, j := strings.IndexByte(v, '#'), strings.IndexByte(v, ':'); i > 0 && j > i {
				o.n, _ = strconv.ParseInt(v[i+1:j], 10, 64)
				o.src = v[j+1:]
			}
			out = append(out, o)
		}
	}
	return out
}

type simOutput struct {
	at, key, src string
	n            int64
}

// converged reports whether every committed input has an output.
func (h *simHost) converged() bool {
	if h.fed < h.opt.inputs || h.feedTxn != nil {
		return false
	}
	seen := make(map[string]bool)
	for _, o := range h.outputs() {
		seen[o.src] = true
	}
	for s := range h.want {
		if !seen[s] {
			return false
		}
	}
	return true
}

// run runs the schedule, drains, and judges. It returns the findings.
func (h *simHost) run() []string {
	for i := range h.opt.instances {
		h.start(fmt.Sprintf("i%d", i+1))
	}
	for step := 0; step < h.opt.steps; step++ {
		h.stepOnce(true)
	}
	return h.drain()
}

// drain ends a run: no more faults; every instance that is down comes
// back, the rest of the inputs are fed, and the members run until every
// committed input has its output. Then it judges, and stops the members.
func (h *simHost) drain() []string {
	for _, inst := range h.down() {
		h.start(inst)
	}
	for h.fed < h.opt.inputs {
		h.feed()
	}
	h.endFeed()
	drained := false
	for step := 0; step < 40000; step++ {
		h.stepOnce(false)
		if step%200 == 0 && h.converged() {
			drained = true
			break
		}
	}
	findings := h.judge()
	if !drained {
		findings = append(findings, "not drained: some committed input has no output after the drain")
	}
	h.stop()
	return findings
}

// runUntil resumes m's session loop until it yields at a phase that
// starts with one of phases, at most limit times; it reports whether it
// got there.
func (h *simHost) runUntil(m *simMember, limit int, phases ...string) bool {
	for range limit {
		if m.actor.Done() || m.killed {
			return false
		}
		h.s.Resume(m.actor)
		if slices.ContainsFunc(phases, func(p string) bool { return strings.HasPrefix(m.actor.Phase(), p) }) {
			return true
		}
		// Let its jobs (restores) run too, so its loop can go on.
		for _, j := range m.jobs {
			if !j.Done() && !j.Killed() {
				h.s.Resume(j)
			}
		}
	}
	return false
}

// settle takes group steps for every active client but except's, and
// nothing else, until the group is stable with every member synced: a
// whole rebalance while every actor stays where it yielded.
func (h *simHost) settle(except ...*simMember) {
	for range 200 {
		moved := false
		for _, m := range h.live() {
			if slices.Contains(except, m) || h.muted(m) {
				continue
			}
			if m.client != nil && m.client.Step() {
				moved = true
			}
		}
		if !moved {
			return
		}
	}
}

// feedN writes n more inputs outside transactions, over every key in turn.
func (h *simHost) feedN(n int) { h.feedOver(n, h.opt.keys) }

// feedOver writes n more inputs outside transactions, over the first keys
// keys in turn.
func (h *simHost) feedOver(n, keys int) {
	h.endFeed()
	for range n {
		key := fmt.Sprintf("k%d", h.fed%keys)
		src := fmt.Sprintf("s%d", h.fed)
		h.fed++
		h.feedKeys[src] = key
		h.c.Append(hostsim.TP{Topic: simIn, Partition: partitionFor([]byte(key), false, h.opt.partitions, 0)}, []byte(key), []byte(src))
		h.want[src] = true
	}
	h.opt.inputs = max(h.opt.inputs, h.fed)
}

// leave stops m and has its instance leave the group, and runs it until
// it stopped.
func (h *simHost) leave(m *simMember) {
	h.s.Note("stop and leave %s", m.name)
	m.app.cfg.LeaveOnShutdown = true
	m.cancel()
	for range 2000 {
		if m.actor.Done() {
			return
		}
		h.s.Resume(m.actor)
		for _, j := range m.jobs {
			if !j.Done() {
				h.s.Resume(j)
			}
		}
	}
	h.t.Fatalf("%s did not stop", m.name)
}

// mute silences m's client past the session timeout, and lets the time
// pass: the group removes it.
func (h *simHost) mute(m *simMember) {
	m.muteUntil = h.s.Now().Add(time.Hour)
	h.s.Note("silence %s", m.name)
	h.s.Advance(h.c.SessionTimeout + time.Second)
	h.c.Tick()
}

// unmute lets m's client speak again.
func (h *simHost) unmute(m *simMember) { m.muteUntil = time.Time{} }

// pick returns the actor of one of ms, chosen by the seed: one of its
// runnable actors.
func (h *simHost) pick(ms ...*simMember) *hostsim.Actor {
	var as []*hostsim.Actor
	for _, m := range ms {
		if !m.killed && !m.actor.Done() {
			as = append(as, m.actor)
		}
		for _, j := range m.jobs {
			if !j.Done() && !j.Killed() {
				as = append(as, j)
			}
		}
	}
	return as[h.s.Rand().IntN(len(as))]
}

// busy runs the members and feeds inputs, without faults, for n steps.
func (h *simHost) busy(n int) {
	for range n {
		h.stepOnce(false)
	}
}

// judge judges the committed outputs: every committed input delivered
// exactly once, none that was not committed, per key in order and with the
// exact count (per-key state exact), and what judgeCommit found.
func (h *simHost) judge() []string {
	findings := slices.Clone(h.findings)
	outs := h.outputs()
	var ds []oracle.Delivery
	next := make(map[string]int64)
	for _, o := range outs {
		ds = append(ds, oracle.Delivery{Source: o.src, At: o.at, Lane: o.key, Rank: o.n})
		next[o.key]++
		if o.n != next[o.key] {
			findings = append(findings, fmt.Sprintf("%s at %s: count %d, want %d (state lost or replayed)", o.src, o.at, o.n, next[o.key]))
			next[o.key] = o.n
		}
		if h.feedKeys[o.src] != o.key {
			findings = append(findings, fmt.Sprintf("%s at %s: key %q, want %q", o.src, o.at, o.key, h.feedKeys[o.src]))
		}
	}
	for _, f := range oracle.ExactlyOnceInOrder(h.want, ds) {
		findings = append(findings, f.String())
	}
	for _, m := range h.members {
		if m.err != nil {
			findings = append(findings, fmt.Sprintf("%s: Run returned %v", m.name, m.err))
		}
	}
	return findings
}

// stop ends the run: live members stop, killed ones unwind.
func (h *simHost) stop() {
	for _, m := range h.live() {
		m.cancel()
	}
	for step := 0; step < 20000 && len(h.live()) > 0; step++ {
		h.stepOnce(false)
	}
	for _, m := range h.live() {
		h.kill(m) // did not stop in time: unwound below
	}
	h.s.Unwind()
}

// summary says what a run did.
func (h *simHost) summary() string {
	kills := 0
	for _, m := range h.members {
		if m.killed {
			kills++
		}
	}
	return fmt.Sprintf("seed %d: %d inputs (%d committed), %d outputs, %d incarnations (%d killed), %d faults, generation %d, %d steps, fingerprint %x",
		h.seed, h.fed, len(h.want), len(h.outputs()), len(h.members), kills, h.faults, h.c.Group().Generation(), h.s.Steps(), h.s.Fingerprint())
}

// simSeeds is how many random schedules TestHostSim runs: a few hundred in
// go test ./stage, more with PARSLEY_HOSTSIM_SEEDS.
func simSeeds(t *testing.T) int {
	if v := os.Getenv("PARSLEY_HOSTSIM_SEEDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("PARSLEY_HOSTSIM_SEEDS=%q: want a positive count", v)
		}
		return n
	}
	if testing.Short() {
		return 40
	}
	return 300
}

// simOptionsFor varies a run's shape with its seed.
func simOptionsFor(seed uint64) simOptions {
	return simOptions{
		partitions: 2 + int32(seed%3),
		keys:       3 + int(seed%4),
		inputs:     24 + int(seed%24),
		instances:  1 + int(seed%3),
		maxMembers: 7,
		faults:     2 + int(seed%5),
		standbys:   int(seed/3) % 2,
		steps:      600 + int(seed%7)*100,
	}
}

// TestHostSim runs the real stage host through random rebalance schedules
// — joins, leaves, kill -9s and restarts, with every group step, restore
// read and store close an interleaving point — and judges each run: every
// committed input delivered exactly once, per-key state exact, no task's
// changelog or offsets committed by a member that did not own it. A failing
// seed reruns alone with PARSLEY_HOSTSIM_SEED.
func TestHostSim(t *testing.T) {
	if v := os.Getenv("PARSLEY_HOSTSIM_SEED"); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		runSimSeed(t, seed, true)
		return
	}
	n := simSeeds(t)
	for seed := range uint64(n) {
		t.Run(fmt.Sprint(seed+1), func(t *testing.T) {
			t.Parallel()
			runSimSeed(t, seed+1, false)
		})
	}
}

func runSimSeed(t *testing.T, seed uint64, verbose bool) {
	h := newSimHost(t, seed, simOptionsFor(seed))
	findings := h.run()
	if len(findings) > 0 || verbose {
		for _, l := range h.s.Trace() {
			t.Log(l)
		}
		t.Log(h.summary())
	}
	if len(findings) > 0 {
		t.Errorf("seed %d (%+v): %d findings (rerun: PARSLEY_HOSTSIM_SEED=%d go test ./stage -run TestHostSim -v):\n%s",
			seed, h.opt, len(findings), seed, strings.Join(findings[:min(len(findings), 20)], "\n"))
	}
}

var _ = kgo.Record{}

// TestHostSimDeterminism: a seed determines its run. Two runs of one seed
// hand over between the same actors at the same phases, with the same
// group and cluster events, to the same fingerprint; another seed differs.
func TestHostSimDeterminism(t *testing.T) {
	run := func(seed uint64) (uint64, int) {
		h := newSimHost(t, seed, simOptionsFor(seed))
		if fs := h.run(); len(fs) > 0 {
			t.Fatalf("seed %d: %v", seed, fs)
		}
		return h.s.Fingerprint(), h.s.Steps()
	}
	seen := make(map[uint64]uint64)
	for seed := uint64(1); seed <= 12; seed++ {
		a, an := run(seed)
		b, bn := run(seed)
		if a != b || an != bn {
			t.Errorf("seed %d ran twice: fingerprints %x and %x, %d and %d steps", seed, a, b, an, bn)
		}
		if other, ok := seen[a]; ok {
			t.Errorf("seeds %d and %d ran alike: %x", other, seed, a)
		}
		seen[a] = seed
	}
}
