package stage

// One client incarnation: the group transact session's options, the
// assignment callbacks, and the poll loop that drives steps.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/parsley-go/parsley/internal/kclient"
	"github.com/twmb/franz-go/pkg/kgo"
)

// baseOpts are every client's options: the seeds, the library's failover
// defaults (internal/kclient: metadata refreshed and failed requests retried
// within a few hundred milliseconds, heartbeats retried through a
// coordinator's failover rather than given up at the session timeout), then
// the user's ClientOpts, which override them.
func (a *App) baseOpts() []kgo.Opt {
	opts := append([]kgo.Opt{kgo.SeedBrokers(a.cfg.Brokers...)}, kclient.GroupOpts(a.cfg.SessionTimeout)...)
	return append(opts, a.cfg.ClientOpts...)
}

// newClient builds a client from baseOpts and opts whose seed list leaves
// out a broker that refuses connections (kclient.Seeds): a coordinator
// lookup sent to a dead broker's seed address ends the request waiting on
// it, and an EndTxn so ended costs a rebuild and a restore.
func (a *App) newClient(opts ...kgo.Opt) (*kgo.Client, error) {
	return kclient.NewClient(append(a.baseOpts(), opts...)...)
}

func (a *App) sessionOpts() []kgo.Opt {
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
		kgo.Balancers(coPartitioner{host: a.standby.host}),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.OnPartitionsAssigned(a.onAssigned),
		kgo.OnPartitionsRevoked(a.asg.onRevoked),
		kgo.OnPartitionsLost(a.asg.onRevoked),
	)
	if a.cfg.SessionTimeout > 0 {
		opts = append(opts, kgo.SessionTimeout(a.cfg.SessionTimeout))
	}
	opts = append(opts, kgo.HeartbeatInterval(heartbeatInterval(a.cfg.SessionTimeout)))
	if a.cfg.RebalanceTimeout > 0 {
		opts = append(opts, kgo.RebalanceTimeout(a.cfg.RebalanceTimeout))
	}
	if a.cfg.TransactionTimeout > 0 {
		opts = append(opts, kgo.TransactionTimeout(a.cfg.TransactionTimeout))
	}
	if tr := a.env.tracing; tr != nil {
		opts = append(opts, kgo.WithHooks(clientHooks{tr.kotel})) // tracing.go
	}
	return opts
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
// most maxHeartbeat; session 0 is the client's default, 45 s.
func heartbeatInterval(session time.Duration) time.Duration {
	if session > 0 && session/3 < maxHeartbeat {
		return session / 3
	}
	return maxHeartbeat
}

func (a *App) onAssigned(ctx context.Context, _ *kgo.Client, m map[string][]int32) {
	if len(m) == 0 {
		return // a cooperative rebalance that gave this member nothing new
	}
	// Before the client fetches the new partitions' offsets, which a
	// departed owner's open transaction would hold back (fence.go).
	a.fenceAbandoned(ctx, m)
	a.asg.onAssigned(m)
}

// clientState is what the session loop did to the current client and
// knows of its assignment; it starts over with each client (reset). Owned
// by the session loop.
type clientState struct {
	seenGen  uint64                   // the assignment generation the last reconcile saw
	paused   map[string][]int32       // assigned partitions not fetched (tasks.go: setPaused)
	rewound  map[topicPartition]int64 // positions set back this session (positions.go)
	rejoined bool                     // this session asked the group to rebalance once (reconcile)
}

// reset forgets what the loop did to the client that ended.
func (c *clientState) reset() {
	clear(c.paused)
	clear(c.rewound)
	c.rejoined = false
}

// session runs one client incarnation until ctx ends or the client fails.
func (a *App) session(ctx context.Context) error {
	seeds := new(kclient.Seeds) // see newClient
	sess, err := kgo.NewGroupTransactSession(append(a.sessionOpts(), seeds.Opt())...)
	if err != nil {
		return &fatal{fmt.Errorf("%w: %w", ErrInvalidConfig, err)}
	}
	seeds.Attach(sess.Client())
	if a.hooks.onSession != nil {
		a.hooks.onSession(sess)
	}
	defer func() {
		a.tasks.resetAll()
		a.asg.dropAll()
		a.client.reset()
		sess.Close() // leaves the group
		a.sessionEnded()
	}()
	// Every transaction's offsets name this instance (fence.go).
	ctx = kgo.PreTxnCommitFnContext(ctx, a.txn.nameCommits)
	// Loading the producer ID fences every earlier incarnation of this
	// instance and aborts its open transaction now, so restores do not wait
	// for the transaction timeout.
	if err := a.initProducer(ctx, sess.Client()); err != nil {
		return err
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, a.cfg.PollInterval)
		polled := time.Now()
		fs := sess.PollRecords(pctx, a.cfg.MaxPollRecords)
		backlog := time.Since(polled) < bufferedPoll // stepfill.go
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
		if err := a.finishRestores(); err != nil {
			return err
		}
		a.standby.tend(ctx, a.tasks.isOpen)
		if err := a.reconcile(ctx, sess.Client()); err != nil {
			return err
		}
		if fs.NumRecords() == 0 && !a.tasks.needsStep() && !a.tasks.timerDue(a.cfg.WallClock()) {
			ended, err := a.txn.rearmRevoke(ctx, sess) // txnend.go
			if err != nil {
				return err
			}
			if ended {
				a.rewind(sess.Client(), nil) // the abort rewound to the committed offsets
			}
			if a.hooks.idle != nil {
				a.hooks.idle()
			}
			a.observe()
			continue
		}
		if fs.NumRecords() > 0 {
			if fs, err = a.fillStep(ctx, sess, fs, backlog); err != nil {
				return err
			}
		}
		if err := a.step(ctx, sess, fs); err != nil {
			return err
		}
	}
}

// fetchErrors logs the fetch errors of a poll, and returns the data losses
// among them as a fatal error: the client has already moved its cursor.
func (a *App) fetchErrors(fs kgo.Fetches) error {
	var lost error
	fs.EachError(func(t string, p int32, err error) {
		if dl := a.fetchDataLoss(t, p, err); dl != nil {
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
// all, so the step feeds every one of them.
func (a *App) fillStep(ctx context.Context, sess *kgo.GroupTransactSession, fs kgo.Fetches, backlog bool) (kgo.Fetches, error) {
	deadline := time.Now().Add(a.cfg.CommitInterval)
	n, polls := fs.NumRecords(), 1
	defer func() {
		if a.hooks.filled != nil {
			a.hooks.filled(polls, n)
		}
	}()
	for n < a.cfg.MaxStepRecords && time.Now().Before(deadline) && ctx.Err() == nil && !a.assignmentChanged() {
		pctx, cancel := context.WithTimeout(ctx, fillWait(backlog, polls, time.Until(deadline)))
		more := sess.PollRecords(pctx, min(a.cfg.MaxPollRecords, a.cfg.MaxStepRecords-n))
		cancel()
		if more.IsClientClosed() {
			return nil, errClientClosed
		}
		if err := a.fetchErrors(more); err != nil {
			return nil, err
		}
		m := more.NumRecords()
		if m == 0 {
			break
		}
		fs = append(fs, more...)
		n += m
		polls++
	}
	return fs, nil
}

// assignmentChanged reports whether the group changed the assignment since
// the last reconcile.
func (a *App) assignmentChanged() bool {
	return a.asg.generation() != a.client.seenGen
}
