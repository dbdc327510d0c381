package stage

// One client incarnation: the group transact session the loop drives, the
// options and group callbacks it is built with, and the poll loop that
// drives steps.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/parsley-go/parsley/internal/kclient"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// producer is what a task asks of the step's transaction: to produce a
// record in it, and to wait for every record produced so far.
type producer interface {
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	Flush(ctx context.Context) error
}

// groupSession is one client incarnation as the session loop drives it: a
// group member whose consumed offsets commit in its transactions.
// kgoSession is franz-go's GroupTransactSession; the host simulator's
// member is the other (hostsim_test.go). The group callbacks and the
// balancer report to the App on the session's own goroutines (sessionOpts).
type groupSession interface {
	producer
	fetchControl
	// PollRecords returns what the client fetched, waiting until ctx ends
	// for something when nothing is.
	PollRecords(ctx context.Context, max int) kgo.Fetches
	Begin() error
	// End ends the open transaction: it commits, with the offsets polled
	// since the last End, when commit is set and the group has not
	// rebalanced the member since; otherwise it aborts and rewinds the
	// client to the committed offsets. anchor, when not nil, is the offset
	// a transaction that consumed nothing commits (txnend.go).
	End(ctx context.Context, commit bool, anchor *offsetAnchor) (committed bool, err error)
	// CommittedOffsets and UncommittedOffsets are the client's view of
	// the group's offsets and of where it has polled past them.
	CommittedOffsets() map[string]map[int32]kgo.EpochOffset
	UncommittedOffsets() map[string]map[int32]kgo.EpochOffset
	SetOffsets(map[string]map[int32]kgo.EpochOffset)
	// InitProducer loads the transactional producer ID, fencing every
	// earlier incarnation of this instance.
	InitProducer(ctx context.Context) error
	// CheckMember asks the group's coordinator whether this member is in
	// its generation; a rebalance in progress is not an error.
	CheckMember(ctx context.Context) error
	// Close leaves the group (a static member only closes) and closes the
	// client.
	Close()
}

// kgoSession is franz-go's GroupTransactSession as a groupSession.
type kgoSession struct {
	*kgo.GroupTransactSession
	group    string // Config.ApplicationID
	instance string // Config.InstanceID: the name every commit carries (fence.go)
}

// CheckMember sends a heartbeat of the member's generation to the group's
// coordinator (beside the client's own, which it does not disturb).
func (s kgoSession) CheckMember(ctx context.Context) error {
	member, gen := s.Client().GroupMetadata()
	req := kmsg.NewPtrHeartbeatRequest()
	req.Group, req.Generation, req.MemberID = s.group, gen, member
	req.InstanceID = kmsg.StringPtr(s.instance)
	resp, err := req.RequestWith(ctx, s.Client())
	if err != nil {
		return fmt.Errorf("stage: heartbeat: %w", err)
	}
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil && !errors.Is(err, kerr.RebalanceInProgress) {
		return fmt.Errorf("stage: heartbeat of member %s in generation %d: %w", member, gen, err)
	}
	return nil
}

func (s kgoSession) Flush(ctx context.Context) error { return s.Client().Flush(ctx) }
func (s kgoSession) CommittedOffsets() map[string]map[int32]kgo.EpochOffset {
	return s.Client().CommittedOffsets()
}

func (s kgoSession) UncommittedOffsets() map[string]map[int32]kgo.EpochOffset {
	return s.Client().UncommittedOffsets()
}
func (s kgoSession) SetOffsets(o map[string]map[int32]kgo.EpochOffset) { s.Client().SetOffsets(o) }
func (s kgoSession) PauseFetchPartitions(m map[string][]int32)         { s.Client().PauseFetchPartitions(m) }
func (s kgoSession) ResumeFetchPartitions(m map[string][]int32)        { s.Client().ResumeFetchPartitions(m) }
func (s kgoSession) ForceRebalance()                                   { s.Client().ForceRebalance() }

func (s kgoSession) InitProducer(ctx context.Context) error {
	_, _, err := s.Client().ProducerID(ctx)
	return err
}

// End names every offset the transaction commits after this instance
// (fence.go), and adds the anchor to a commit that has none.
func (s kgoSession) End(ctx context.Context, commit bool, anchor *offsetAnchor) (bool, error) {
	inst := s.instance
	ctx = kgo.PreTxnCommitFnContext(ctx, func(req *kmsg.TxnOffsetCommitRequest) error {
		if anchor != nil && len(req.Topics) == 0 {
			rt := kmsg.NewTxnOffsetCommitRequestTopic()
			rt.Topic = anchor.topic
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition = anchor.partition
			rp.Offset = anchor.at.Offset
			rp.LeaderEpoch = anchor.at.Epoch
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
		}
		nameCommits(req, inst)
		return nil
	})
	return s.GroupTransactSession.End(ctx, kgo.TransactionEndTry(commit))
}

// baseOpts are every client's options: the seeds, the library's failover
// defaults (internal/kclient: metadata refreshed and failed requests retried
// within a few hundred milliseconds, heartbeats retried through a
// coordinator's failover rather than given up at the session timeout), a
// fetch wait of fetchMaxWait, then the user's ClientOpts, which override
// them.
func (a *App) baseOpts() []kgo.Opt {
	opts := append([]kgo.Opt{kgo.SeedBrokers(a.cfg.Brokers...)}, kclient.GroupOpts(a.cfg.SessionTimeout)...)
	opts = append(opts, kgo.FetchMaxWait(fetchMaxWait))
	return append(opts, a.cfg.ClientOpts...)
}

// fetchMaxWait is how long a broker may hold a fetch that finds nothing
// new (franz-go's default is 5 s; the Java consumer's 500 ms). A task that
// finishes its restore resumes its partitions, and franz-go fetches them
// only once the fetch in flight for the others returns: with 5 s, a
// restored instance sat up to 5 s on records it could process.
const fetchMaxWait = 500 * time.Millisecond

// newClient builds a client from baseOpts and opts whose seed list leaves
// out a broker that refuses connections (kclient.Seeds): a coordinator
// lookup sent to a dead broker's seed address ends the request waiting on
// it, and an EndTxn so ended costs a rebuild and a restore.
func (a *App) newClient(opts ...kgo.Opt) (*kgo.Client, error) {
	return kclient.NewClient(append(a.baseOpts(), opts...)...)
}

// dialKafka builds the session's franz-go client: a transactional group
// member whose callbacks and balancer report to the App. The balancer
// learns the member ID of each sync from the client, which exists only
// once the session does: a sync before that (none can come sooner than a
// round trip) continues no holding (ownership.synced).
func (a *App) dialKafka(context.Context) (groupSession, error) {
	var cl atomic.Pointer[kgo.Client]
	member := func() string {
		if c := cl.Load(); c != nil {
			id, _ := c.GroupMetadata()
			return id
		}
		return ""
	}
	var sources []string
	for t := range a.topo.bySource {
		sources = append(sources, t)
	}
	sort.Strings(sources)
	opts := append(a.baseOpts(),
		kgo.TransactionalID(a.cfg.ApplicationID+"-"+a.cfg.InstanceID),
		kgo.ConsumerGroup(a.cfg.ApplicationID),
		// Static membership (KIP-345): a restart within the session
		// timeout gets its partitions back without a rebalance.
		kgo.InstanceID(a.cfg.InstanceID),
		kgo.ConsumeTopics(sources...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		kgo.Balancers(coPartitioner{host: a.tm.standby.host, synced: func(assigned map[string][]int32) {
			a.own.synced(member(), assigned)
		}}),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.OnPartitionsAssigned(a.onAssigned),
		kgo.OnPartitionsRevoked(a.own.onRevoked),
		kgo.OnPartitionsLost(a.own.onLost),
	)
	opts = append(opts,
		kgo.SessionTimeout(a.cfg.SessionTimeout),
		kgo.HeartbeatInterval(heartbeatInterval(a.cfg.SessionTimeout)),
		kgo.RebalanceTimeout(a.cfg.RebalanceTimeout),
		kgo.TransactionTimeout(a.cfg.TransactionTimeout),
	)
	if tr := a.env.tracing; tr != nil {
		opts = append(opts, kgo.WithHooks(clientHooks{tr.kotel})) // tracing.go
	}
	seeds := new(kclient.Seeds) // see newClient
	sess, err := kgo.NewGroupTransactSession(append(opts, seeds.Opt())...)
	if err != nil {
		return nil, &fatal{fmt.Errorf("%w: %w", ErrInvalidConfig, err)}
	}
	cl.Store(sess.Client())
	seeds.Attach(sess.Client())
	if a.hooks.onSession != nil {
		a.hooks.onSession(sess)
	}
	return kgoSession{sess, a.cfg.ApplicationID, a.cfg.InstanceID}, nil
}

// maxHeartbeat is the longest heartbeat interval of a stage's client. On
// Kafka a member hears of a rebalance only in the answer to a heartbeat,
// and from the moment one member joins until the last one has, every
// member that joined waits: its step cannot commit (GroupTransactSession
// ends a transaction only after a heartbeat, and none runs during a join),
// so even tasks that do not move stop. The interval bounds that wait. At a
// third of the session timeout (1 s in the failover soak, 3 s at the
// client's default 45 s session) every task stopped for up to that long
// per round, and a member joining takes two cooperative rounds; the first
// heartbeat after a join comes at 500 ms (franz-go), which stopped every
// task of the others for that long when a departed instance came back.
const maxHeartbeat = 250 * time.Millisecond

// heartbeatInterval is a third of the session timeout (Kafka's rule), at
// most maxHeartbeat.
func heartbeatInterval(session time.Duration) time.Duration {
	return min(session/3, maxHeartbeat)
}

// onAssigned is the session's OnPartitionsAssigned: it fences the departed
// owners of what m adds, before the client fetches their offsets, which
// their open transactions would hold back (fence.go).
func (a *App) onAssigned(ctx context.Context, _ *kgo.Client, m map[string][]int32) {
	if len(m) == 0 {
		return // a cooperative rebalance that gave this member nothing new
	}
	a.cluster.fenceAbandoned(ctx, m)
	a.own.onAssigned(m)
}

// session runs one client incarnation until ctx ends or the client fails.
func (a *App) session(ctx context.Context) error {
	sess, err := a.dial(ctx)
	if err != nil {
		return err
	}
	defer func() {
		a.tm.sessionEnded()
		a.own.ended()
		a.positions.sessionEnded()
		sess.Close() // leaves the group
		a.sessionEnded()
	}()
	// Loading the producer ID fences every earlier incarnation of this
	// instance and aborts its open transaction now, so restores do not wait
	// for the transaction timeout.
	if err := a.initProducer(ctx, sess); err != nil {
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, a.cfg.PollInterval)
		polled := a.cfg.WallClock()
		fs := sess.PollRecords(pctx, a.cfg.MaxPollRecords)
		backlog := a.cfg.WallClock().Sub(polled) < bufferedPoll // stepfill.go
		cancel()
		if fs.IsClientClosed() {
			return errClientClosed
		}
		if err := ctx.Err(); err != nil {
			return err // the polled records are fetched again next time
		}
		if err := a.fetchErrors(fs); err != nil {
			return err
		}
		if err := a.tm.finishRestores(); err != nil {
			return err
		}
		a.tm.tendStandbys(ctx)
		if ran, err := a.tm.reconcile(ctx, sess); err != nil {
			return err
		} else if ran {
			a.observe() // readers see the new task set before its first step ends
		}
		if fs.NumRecords() == 0 && !a.tm.needsStep() && !a.tm.timerDue(a.cfg.WallClock()) {
			ended, err := a.txn.rearmRevoke(ctx, sess) // txnend.go
			if err != nil {
				return err
			}
			if ended {
				a.positions.rewind(sess, nil) // the abort rewound to the committed offsets
			}
			if a.hooks.idle != nil {
				a.hooks.idle()
			}
			a.observe()
			continue
		}
		moved := false
		if fs.NumRecords() > 0 {
			if fs, moved, err = a.fillStep(ctx, sess, fs, backlog); err != nil {
				return err
			}
		}
		if err := a.step(ctx, sess, fs, moved); err != nil {
			return err
		}
	}
}

// fetchErrors logs the fetch errors of a poll, and returns the data losses
// among them as a fatal error: the client has already moved its cursor.
func (a *App) fetchErrors(fs kgo.Fetches) error {
	var lost error
	fs.EachError(func(t string, p int32, err error) {
		if dl := fetchDataLoss(a.cfg.ApplicationID, t, p, err); dl != nil {
			lost = errors.Join(lost, dl)
		} else if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
			a.log.Warn("stage: fetch error", "topic", t, "partition", p, "err", err)
		}
	})
	if lost != nil {
		return &fatal{lost}
	}
	return nil
}

// errClientClosed ends a session whose client was closed under a poll.
var errClientClosed = errors.New("stage: client closed")

// stepPollWait is how long a step's further poll waits for records not yet
// fetched: long enough to take what the client has buffered, short enough
// that a step under light load commits without waiting. A step that found
// a backlog waits longer once (fillWait, stepfill.go).
const stepPollWait = time.Millisecond

// fillStep polls on after the step's first poll, fs, until
// Config.CommitInterval has passed since it, the step holds
// Config.MaxStepRecords, a poll finds nothing already fetched (backlog: the
// loop's poll found fs buffered, fillWait), the
// assignment changes (a revoke ends the step promptly; reconcile runs
// before the next one) or ctx ends. Every record polled is in the step: the
// client marks polled records uncommitted, and End commits or rewinds them
// all, so the step feeds every one of them — unless the assignment changed
// while a poll waited (moved): the client may then have fetched a
// partition again from its committed offset, and the step aborts without
// feeding any (errMovedDuringStep).
func (a *App) fillStep(ctx context.Context, sess groupSession, fs kgo.Fetches, backlog bool) (_ kgo.Fetches, moved bool, _ error) {
	deadline := a.cfg.WallClock().Add(a.cfg.CommitInterval)
	n, polls := fs.NumRecords(), 1
	defer func() {
		if a.hooks.filled != nil {
			a.hooks.filled(polls, n)
		}
	}()
	for n < a.cfg.MaxStepRecords && a.cfg.WallClock().Before(deadline) && ctx.Err() == nil && !a.tm.changed() {
		if a.hooks.phase != nil {
			a.hooks.phase("fill")
		}
		pctx, cancel := context.WithTimeout(ctx, fillWait(backlog, polls, deadline.Sub(a.cfg.WallClock())))
		more := sess.PollRecords(pctx, min(a.cfg.MaxPollRecords, a.cfg.MaxStepRecords-n))
		cancel()
		if more.IsClientClosed() {
			return nil, false, errClientClosed
		}
		if err := a.fetchErrors(more); err != nil {
			return nil, false, err
		}
		m := more.NumRecords()
		if m == 0 {
			break
		}
		fs = append(fs, more...)
		n += m
		polls++
		if a.tm.changed() && !a.tm.sab.has(sabFeedAcrossMoves) {
			return fs, true, nil
		}
	}
	return fs, false, nil
}
