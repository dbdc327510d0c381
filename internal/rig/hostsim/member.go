package hostsim

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Member is one client incarnation of a group member with a transactional
// producer: franz-go's GroupTransactSession as the host drives it, with
// the group protocol's steps taken when the driver calls Step (they run
// on the client's goroutines in franz-go, beside the host's loop).
//
// It keeps franz-go's rules that exactly-once rests on:
//
//   - a sync's assignment goes to the balancer's ParseSyncAssignment; the
//     partitions it lost go to the revoke callback and the member rejoins;
//     the ones it gained to the assign callback, and their offsets are
//     fetched stably (a partition with a commit pending in an open
//     transaction is not fetched until the transaction ends);
//   - the revoke and lost callbacks are passed on only while the session's
//     revoked (or lost) flag is clear, and only End clears it: a second
//     revoke between two Ends is swallowed;
//   - End commits only when asked, with neither flag set, the offset
//     commit accepted (the member is in the group's generation, and the
//     group is not completing a rebalance) and the heartbeat after it ok —
//     or, when there is no offset to commit, with neither flag set alone:
//     franz-go then sends no offset commit, and nobody checks the member;
//     between the heartbeat and the end of EndTxn a callback waits for it
//     (the session's lock); an End that does not commit rewinds the client
//     to the committed offsets.
type Member struct {
	c        *Cluster
	Instance string
	TxnID    string
	Topics   []string
	Balancer kgo.GroupBalancer
	// The host's callbacks, as it registered them with franz-go.
	OnAssigned, OnRevoked, OnLost func(ctx context.Context, cl *kgo.Client, m map[string][]int32)

	memberID  string
	gen       int32
	fencedOut bool // a newer incarnation of the instance replaced it
	owned     map[string][]int32
	rejoin    bool

	pos       map[TP]int64 // where the next poll reads
	committed map[TP]int64 // the client's view of the group's offsets
	loading   map[TP]bool  // assigned, its offset fetch waiting on a pending commit
	paused    map[TP]bool

	pid     int64
	epoch   int16
	txn     *Txn
	revoked bool
	lost    bool
	locked  bool     // inside End's locked span: callbacks wait
	waiting []func() // the callbacks that waited
	closed  bool
	dead    bool // killed: it does nothing more
}

// NewMember returns a client incarnation of instance inst.
func (c *Cluster) NewMember(inst, txnID string, topics []string, b kgo.GroupBalancer) *Member {
	return &Member{
		c: c, Instance: inst, TxnID: txnID, Topics: topics, Balancer: b, gen: -1,
		owned: make(map[string][]int32), pos: make(map[TP]int64), committed: make(map[TP]int64),
		loading: make(map[TP]bool), paused: make(map[TP]bool),
	}
}

// Generation is the generation of the member's last join (franz-go's
// GroupMetadata).
func (m *Member) Generation() int32 { return m.gen }

// MemberID is the member's ID in the group, "" when not a member.
func (m *Member) MemberID() string { return m.memberID }

// Kill stops the member for good, as SIGKILL stops its process: it sends
// nothing more, and its open transaction stays open until the next
// incarnation of its transactional ID or the transaction timeout ends it.
func (m *Member) Kill() { m.dead = true }

// Owns reports whether the client holds partition p of topic: its last
// sync gave it, and no sync or loss took it since.
func (m *Member) Owns(topic string, p int32) bool { return slices.Contains(m.owned[topic], p) }

// InGroup reports whether the coordinator counts the member in the group.
func (m *Member) InGroup() bool {
	return m.memberID != "" && !m.fencedOut && m.c.group.member(m.memberID) != nil
}

// Active reports whether the member is neither closed nor killed.
func (m *Member) Active() bool { return !m.closed && !m.dead }

// Step takes the member's next step in the group protocol, as its
// heartbeat goroutine would: join when it must, sync when its generation
// is planned, heartbeat otherwise (hearing of a join round in its answer,
// or that it was removed from the group). It reports whether it did
// anything.
func (m *Member) Step() bool {
	if !m.Active() || m.fencedOut || len(m.waiting) > 0 {
		// A callback waiting for End blocks the client's group
		// goroutine: it neither heartbeats nor rejoins meanwhile.
		return false
	}
	g := m.c.group
	gm := (*gmember)(nil)
	if m.memberID != "" {
		gm = g.member(m.memberID)
	}
	switch {
	case gm == nil && m.memberID != "":
		// Removed from the group: the next heartbeat says so; the member
		// rejoins once its lost callback returned.
		m.memberID = ""
		m.loseAll()
		return true
	case gm == nil, m.rejoin:
		m.c.s.Note("%s rejoins (member %v, asked %v)", m.Instance, gm != nil, m.rejoin)
		m.join()
		return true
	case g.state == preparing && !gm.joined:
		m.join()
		return true
	case gm.sync != nil && m.gen == g.gen:
		m.sync(gm)
		return true
	}
	gm.beat = m.c.s.now
	loaded := m.loadOffsets()
	return loaded
}

func (m *Member) join() {
	m.rejoin = false
	meta := m.Balancer.JoinGroupMetadata(m.Topics, m.owned, m.gen)
	m.c.group.join(m, meta)
}

// sync takes the member's assignment of the new generation.
func (m *Member) sync(gm *gmember) {
	b := gm.sync
	m.c.group.synced(gm)
	assigned, err := m.Balancer.ParseSyncAssignment(b)
	if err != nil {
		panic(fmt.Sprintf("hostsim: parse sync assignment: %v", err))
	}
	m.c.s.Note("%s synced generation %d: %v", m.memberID, m.gen, assigned)
	lost := diff(m.owned, assigned)
	added := diff(assigned, m.owned)
	m.owned = assigned
	if len(lost) > 0 {
		for t, ps := range lost {
			for _, p := range ps {
				tp := TP{t, p}
				delete(m.pos, tp)
				delete(m.committed, tp)
				delete(m.loading, tp)
			}
		}
		// Cooperative: the partitions given up go out in a second round,
		// which the member joins once its revoke callback returned.
		m.callback("revoke", func() { m.revoke(lost); m.rejoin = true })
	}
	if len(added) > 0 {
		if m.OnAssigned != nil {
			m.OnAssigned(context.Background(), nil, added)
		}
		for t, ps := range added {
			for _, p := range ps {
				m.loading[TP{t, p}] = true
			}
		}
		m.loadOffsets()
	}
}

// revoke is the transact session's revoke wrapper around the host's
// callback.
func (m *Member) revoke(lost map[string][]int32) {
	if m.revoked {
		m.c.s.Note("%s: revoke of %v swallowed (a revoke is pending since the last End)", m.memberID, lost)
		return
	}
	m.revoked = true
	if m.OnRevoked != nil {
		m.OnRevoked(context.Background(), nil, lost)
	}
}

// loseAll is a loss of the membership: the lost callback, through the
// session's wrapper.
func (m *Member) loseAll() {
	all := m.owned
	m.owned = make(map[string][]int32)
	clear(m.pos)
	clear(m.committed)
	clear(m.loading)
	m.callback("lost", func() {
		if m.lost {
			m.c.s.Note("%s: lost callback swallowed (a loss is pending since the last End)", m.Instance)
			return
		}
		m.lost = true
		if m.OnLost != nil {
			m.OnLost(context.Background(), nil, all)
		}
	})
}

// callback runs fn now, or after End's locked span when inside it.
func (m *Member) callback(what string, fn func()) {
	if m.locked {
		m.c.s.Note("%s: %s callback waits for End", m.memberID, what)
		m.waiting = append(m.waiting, fn)
		return
	}
	fn()
}

// loadOffsets fetches, stably, the offsets of the partitions waiting for
// them. It reports whether it loaded any.
func (m *Member) loadOffsets() bool {
	g := m.c.group
	any := false
	for _, tp := range slices.SortedFunc(maps.Keys(m.loading), compareTP) {
		if g.PendingOn(tp) {
			continue
		}
		delete(m.loading, tp)
		if o, ok := g.committed[tp]; ok {
			m.committed[tp] = o.At
			m.pos[tp] = o.At
		} else {
			m.pos[tp] = 0 // the log start
		}
		any = true
	}
	return any
}

// PollRecords returns what the member may read now: from each assigned,
// loaded and unpaused partition, read_committed, up to max records in
// all. It yields first (a poll waits for fetches).
func (m *Member) PollRecords(_ context.Context, max int) kgo.Fetches {
	m.c.s.Yield("poll")
	if m.closed {
		return kgo.NewErrFetch(kgo.ErrClientClosed)
	}
	m.loadOffsets()
	var tps []TP
	for _, tp := range slices.SortedFunc(maps.Keys(m.pos), compareTP) {
		if !m.paused[tp] {
			tps = append(tps, tp)
		}
	}
	if len(tps) == 0 {
		return nil
	}
	start := m.c.s.rng.IntN(len(tps))
	byTopic := make(map[string][]kgo.FetchPartition)
	n := 0
	for i := range tps {
		tp := tps[(start+i)%len(tps)]
		if n >= max {
			break
		}
		recs, next := m.c.ReadCommitted(tp, m.pos[tp], max-n)
		if next == m.pos[tp] {
			continue
		}
		m.c.s.Note("%s polled %s %d-%d", m.Instance, tp, m.pos[tp], next-1)
		m.pos[tp] = next
		fp := kgo.FetchPartition{Partition: tp.Partition}
		for _, r := range recs {
			if r.Control {
				fp.Records = append(fp.Records, controlRecord(tp.Topic, tp.Partition, r.Offset))
				continue
			}
			fp.Records = append(fp.Records, &kgo.Record{
				Topic: tp.Topic, Partition: tp.Partition, Offset: r.Offset,
				Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: m.c.s.now,
			})
		}
		n += len(recs)
		byTopic[tp.Topic] = append(byTopic[tp.Topic], fp)
	}
	if len(byTopic) == 0 {
		return nil
	}
	f := kgo.Fetch{}
	for _, t := range slices.Sorted(maps.Keys(byTopic)) {
		f.Topics = append(f.Topics, kgo.FetchTopic{Topic: t, Partitions: byTopic[t]})
	}
	return kgo.Fetches{f}
}

// InitProducer loads the producer ID, fencing earlier incarnations.
func (m *Member) InitProducer(context.Context) error {
	m.c.s.Yield("init producer")
	m.pid, m.epoch = m.c.InitProducer(m.TxnID)
	return nil
}

// CheckMember is a heartbeat of the member's generation: an error when the
// coordinator does not count the member in it (a rebalance in progress is
// no error).
func (m *Member) CheckMember(context.Context) error {
	m.c.s.Yield("member check")
	g := m.c.group
	switch gm := (*gmember)(nil); {
	case m.memberID != "" && !m.fencedOut:
		if gm = g.member(m.memberID); gm == nil {
			return kerr.UnknownMemberID
		}
		if m.gen != g.gen && g.state != preparing {
			return kerr.IllegalGeneration
		}
		return nil
	default:
		return kerr.UnknownMemberID
	}
}

// Begin opens a transaction.
func (m *Member) Begin() error {
	t, err := m.c.BeginTxn(m.TxnID, m.epoch)
	if err != nil {
		return err
	}
	m.txn = t
	return nil
}

// Produce writes r into the open transaction; the promise runs at once.
func (m *Member) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	if m.txn == nil {
		promise(r, errors.New("hostsim: produce outside a transaction"))
		return
	}
	off, err := m.c.Produce(m.txn, TP{r.Topic, r.Partition}, r.Key, r.Value, r.Headers, r.Timestamp)
	r.Offset = off
	promise(r, err)
}

// Flush waits for the records produced so far: they are all written.
func (m *Member) Flush(context.Context) error {
	m.c.s.Yield("flush")
	return nil
}

// CommittedOffsets is the client's view of the group's offsets.
func (m *Member) CommittedOffsets() map[string]map[int32]kgo.EpochOffset {
	out := make(map[string]map[int32]kgo.EpochOffset)
	for tp, at := range m.committed {
		if out[tp.Topic] == nil {
			out[tp.Topic] = make(map[int32]kgo.EpochOffset)
		}
		out[tp.Topic][tp.Partition] = kgo.EpochOffset{Epoch: -1, Offset: at}
	}
	return out
}

// UncommittedOffsets are the positions polled past the committed offsets.
func (m *Member) UncommittedOffsets() map[string]map[int32]kgo.EpochOffset {
	out := make(map[string]map[int32]kgo.EpochOffset)
	for tp, at := range m.uncommitted() {
		if out[tp.Topic] == nil {
			out[tp.Topic] = make(map[int32]kgo.EpochOffset)
		}
		out[tp.Topic][tp.Partition] = kgo.EpochOffset{Epoch: -1, Offset: at}
	}
	return out
}

// uncommitted returns the positions that differ from the committed
// offsets (the log start where there is none).
func (m *Member) uncommitted() map[TP]int64 {
	out := make(map[TP]int64)
	for tp, at := range m.pos {
		c, ok := m.committed[tp]
		if !ok {
			c = 0
		}
		if at != c {
			out[tp] = at
		}
	}
	return out
}

// SetOffsets moves the positions of assigned partitions.
func (m *Member) SetOffsets(set map[string]map[int32]kgo.EpochOffset) {
	for t, ps := range set {
		for p, eo := range ps {
			tp := TP{t, p}
			if _, ok := m.pos[tp]; ok {
				m.pos[tp] = eo.Offset
			}
		}
	}
}

// PauseFetchPartitions stops reading the partitions.
func (m *Member) PauseFetchPartitions(ps map[string][]int32) {
	for t, parts := range ps {
		for _, p := range parts {
			m.paused[TP{t, p}] = true
		}
	}
}

// ResumeFetchPartitions reads the partitions again.
func (m *Member) ResumeFetchPartitions(ps map[string][]int32) {
	for t, parts := range ps {
		for _, p := range parts {
			delete(m.paused, TP{t, p})
		}
	}
}

// ForceRebalance rejoins the group at the next Step.
func (m *Member) ForceRebalance() {
	m.c.s.Note("%s: forced rebalance", m.Instance)
	m.rejoin = true
}

// End ends the open transaction (GroupTransactSession.End). anchor, when
// set, is the offset a commit without consumed offsets commits; meta names
// the committer on every offset.
func (m *Member) End(_ context.Context, commit bool, anchor *TP, anchorAt int64, meta string) (committed bool, err error) {
	t := m.txn
	m.txn = nil
	defer m.endReset()
	m.c.s.Yield("end")
	failed := m.revoked || m.lost
	post := m.uncommitted()
	if len(post) == 0 && anchor != nil {
		post[*anchor] = anchorAt
	}
	var commitErr error
	okBeat := false
	switch {
	case commit && !failed && t != nil && len(post) == 0:
		// Nothing to commit: franz-go sends no offset commit, and skips
		// the heartbeat after it. The coordinator checks nothing.
		okBeat = true
	case commit && !failed && t != nil:
		g := m.c.group
		switch gm := g.member(m.memberID); {
		case m.fencedOut || gm == nil:
			commitErr = kerr.UnknownMemberID
		case m.gen != g.gen:
			commitErr = kerr.IllegalGeneration
		case g.state == completing:
			commitErr = kerr.RebalanceInProgress
		default:
			for _, tp := range slices.SortedFunc(maps.Keys(post), compareTP) {
				if m.c.OnTouch != nil {
					m.c.OnTouch(t, tp, true)
				}
				t.Offsets[tp] = post[tp]
			}
			t.Meta, t.Member, t.Gen = meta, m.memberID, m.gen
		}
		if commitErr == nil {
			m.c.s.Yield("end: offsets committed")
			// The heartbeat after the offset commit: ok, or a rebalance
			// in progress (KIP-447 lets the commit go on); a member
			// removed meanwhile fails it.
			okBeat = !m.fencedOut && g.member(m.memberID) != nil && m.Active()
		}
	}
	// The session's lock: a callback from here on waits for End.
	m.locked = true
	m.c.s.Yield("end: ending")
	tryCommit := commit && !m.revoked && !m.lost && commitErr == nil && okBeat && t != nil
	if t != nil {
		if err := m.c.EndTxn(t, tryCommit); err != nil {
			m.locked = false
			return false, err
		}
	}
	m.locked = false
	if tryCommit {
		maps.Copy(m.committed, post)
		return true, nil
	}
	// An abort rewinds the client to the committed offsets.
	for tp := range m.pos {
		if c, ok := m.committed[tp]; ok {
			m.pos[tp] = c
		} else {
			m.pos[tp] = 0
		}
	}
	return false, nil
}

// endReset is End's deferred reset of the session's flags; the callbacks
// that waited for End run either before it or after it, as franz-go's
// goroutines may order them.
func (m *Member) endReset() {
	waiting := m.waiting
	m.waiting = nil
	reset := func() { m.revoked, m.lost = false, false }
	if len(waiting) > 0 && m.c.s.rng.IntN(2) == 0 {
		reset()
		for _, fn := range waiting {
			fn()
		}
		return
	}
	for _, fn := range waiting {
		fn()
	}
	reset()
}

// Close closes the client. A static member does not leave the group: its
// session times out, or its next incarnation replaces it.
func (m *Member) Close() {
	if m.closed {
		return
	}
	m.closed = true
	if m.txn != nil {
		_ = m.c.EndTxn(m.txn, false)
		m.txn = nil
	}
	all := m.owned
	m.owned = make(map[string][]int32)
	if len(all) > 0 {
		m.revoke(all)
	}
}

func diff(a, b map[string][]int32) map[string][]int32 {
	out := make(map[string][]int32)
	for t, ps := range a {
		for _, p := range ps {
			if !slices.Contains(b[t], p) {
				out[t] = append(out[t], p)
			}
		}
	}
	return out
}
