package failover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parsley-go/parsley/internal/rig/testkafka"
	"github.com/parsley-go/parsley/internal/wait"
	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Options shape one soak run.
type Options struct {
	Partitions int32         // of each topic (default 3)
	Warmup     time.Duration // steady state before the first fault and after each restart (default 10s)
	StallLimit time.Duration // how long a fault may stall the pipeline before it is reported stuck (default 90s)
	Drain      time.Duration // how long the outputs may take to catch up after the producer stops (default 2m)
	// Rolling adds a rolling restart after the three kills: each broker
	// in turn is stopped with SIGTERM (a controlled shutdown, in which
	// Kafka moves its leaderships before it exits) and restarted.
	Rolling bool
	// SessionTimeout is the stage instances' group session timeout
	// (default 45 s, Kafka's and the stage's default). It must outlast a
	// broker failure: with 6 s, shorter than the brokers' own failure
	// detection (broker.session.timeout.ms, 9 s), a live group coordinator
	// expired a member whose heartbeats the dead broker had held up.
	SessionTimeout time.Duration
	Logf           func(format string, args ...any)
	StageLog       *slog.Logger // the stage instances' logger (default: discard)
	// ClientLog, if set, receives the franz-go debug logs of the stage
	// instances and the producer, each line prefixed with the wall-clock
	// time and the client's name, for a fault's timeline.
	ClientLog io.Writer
}

func (o *Options) defaults() {
	if o.Partitions <= 0 {
		o.Partitions = 3
	}
	if o.Warmup <= 0 {
		o.Warmup = 10 * time.Second
	}
	if o.SessionTimeout <= 0 {
		o.SessionTimeout = 45 * time.Second
	}
	if o.StallLimit <= 0 {
		o.StallLimit = 90 * time.Second
	}
	if o.Drain <= 0 {
		o.Drain = 2 * time.Minute
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.StageLog == nil {
		o.StageLog = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Fault is one broker killed, or stopped, and restarted.
type Fault struct {
	// Kind is "partition leader", "transaction coordinator" or "group
	// coordinator" for a SIGKILL, "controlled shutdown" for a SIGTERM.
	Kind   string
	Broker int32
	// Elected is how long after the kill the first surviving broker
	// answered that the fault's target had moved: orders[0] a new leader,
	// the stage's transactional ID or group a new coordinator, or, for a
	// controlled shutdown, the broker no leadership left. Zero if it was
	// never seen.
	Elected time.Duration
	// Moved is how long after the kill the first surviving broker's
	// metadata named the broker leader of no partition of any topic,
	// internal ones included.
	Moved time.Duration
	// Input is how long after the kill every partition of the source
	// topics had a new committed record: the producer's own failover.
	Input time.Duration
	// Stall is how long after the kill every output partition had
	// progressed again; Output holds each partition's.
	Stall  time.Duration
	Output []time.Duration
}

// ClientShare is the part of the stall after the cluster had elected:
// Stall - Elected, or the whole stall if no election was seen.
func (f Fault) ClientShare() time.Duration { return f.Stall - f.Elected }

// Report is the outcome of one run.
type Report struct {
	Faults     []Fault
	Orders     int // committed orders
	Payments   int // committed payments
	Aborted    int // order IDs written only in aborted transactions
	Outputs    int // settlements read
	Violations []Violation
	Elapsed    time.Duration
}

const (
	appID     = "soak"
	stageName = "settlement"
	orders    = "orders"
	payments  = "payments"
	settled   = "settlements"
)

type account struct {
	Ordered bool
	Paid    int64
}

func settlementStage() *stage.Stage {
	o := stage.NewTopic(orders, stage.String(), stage.String())
	p := stage.NewTopic(payments, stage.String(), stage.String())
	s := stage.NewTopic(settled, stage.String(), stage.String())
	b := stage.WithState(stage.Named(stageName), stage.JSON[account](), account{})
	stage.OnFold(b, o, func(a account, m stage.Message[string, string]) (stage.Step[account], error) {
		a.Ordered = true
		return stage.Next(a, s.Send(m.Key, "ordered")), nil
	})
	stage.OnFold(b, p, func(a account, m stage.Message[string, string]) (stage.Step[account], error) {
		if !a.Ordered {
			return stage.Next(a, s.Send(m.Key, "early")), nil
		}
		a.Paid++
		return stage.Next(a, s.Send(m.Key, fmt.Sprintf("settled %d", a.Paid))), nil
	})
	return b.Into(s).MustBuild()
}

// Run starts a three-node cluster, runs the pipeline through the three
// faults and checks the outputs. An error means the run could not be
// carried out (a cluster that would not start, a fault that stalled the
// pipeline past StallLimit); violations are in the report.
func Run(ctx context.Context, opts Options) (Report, error) {
	opts.defaults()
	began := time.Now()
	var rep Report
	c, err := testkafka.Start(ctx, testkafka.Config{Nodes: 3, MinInsyncReplicas: 2})
	if err != nil {
		return rep, err
	}
	defer c.Close()
	opts.Logf("cluster up: %v", c.Addrs())

	admCl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		return rep, err
	}
	defer admCl.Close()
	adm := kadm.NewClient(admCl)
	compact := "compact"
	for _, t := range []struct {
		name string
		cfg  map[string]*string
	}{{orders, nil}, {payments, nil}, {settled, nil}, {stage.ChangelogTopic(appID, stageName), map[string]*string{"cleanup.policy": &compact}}} {
		r, err := adm.CreateTopic(ctx, opts.Partitions, 3, t.cfg, t.name)
		if err == nil {
			err = r.Err
		}
		if err != nil {
			return rep, fmt.Errorf("failover: create topic %q: %w", t.name, err)
		}
		if err := waitLed(ctx, admCl, t.name, opts.Partitions); err != nil {
			return rep, err
		}
	}

	dir, err := os.MkdirTemp("", "parsley-failover-")
	if err != nil {
		return rep, err
	}
	defer os.RemoveAll(dir)

	runCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()
	var wg sync.WaitGroup
	// Instances and the producer report here why they stopped early.
	appErrs := make(chan error, 4)
	st := settlementStage()
	for i := range 3 {
		inst := fmt.Sprintf("i%d", i+1)
		app, err := stage.New(stage.Config{
			ApplicationID:      appID,
			InstanceID:         inst,
			Brokers:            c.Addrs(),
			StateDir:           filepath.Join(dir, inst),
			SessionTimeout:     opts.SessionTimeout,
			RebalanceTimeout:   10 * time.Second,
			TransactionTimeout: 20 * time.Second,
			Logger:             opts.StageLog.With("instance", inst),
			ClientOpts:         clientLog(opts.ClientLog, inst),
		}, st)
		if err != nil {
			return rep, err
		}
		wg.Go(func() {
			if err := app.Run(runCtx); err != nil && !errors.Is(err, context.Canceled) {
				appErrs <- fmt.Errorf("failover: stage instance %s: %w", inst, err)
			}
		})
	}
	defer wg.Wait()

	prog := newProgress(opts.Partitions)
	wg.Go(func() { prog.follow(runCtx, c.Addrs()) })

	prod := &producer{adm: adm, addrs: c.Addrs(), partitions: opts.Partitions, logf: opts.Logf, opts: clientLog(opts.ClientLog, "producer")}
	prodCtx, stopProd := context.WithCancel(runCtx)
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		if err := prod.run(prodCtx); err != nil {
			appErrs <- err
		}
	}()
	failed := func() error {
		select {
		case err := <-appErrs:
			return err
		default:
			return nil
		}
	}

	fail := func(err error) (Report, error) {
		stopProd()
		<-prodDone
		stopAll()
		return rep, err
	}
	// Log progress while the run goes on, for a stall's post-mortem.
	wg.Go(func() {
		for wait.Sleep(runCtx, 10*time.Second) == nil {
			opts.Logf("progress: %d producer transactions committed, %d settlements read", prod.committed.Load(), prog.n.Load())
		}
	})
	if err := prog.waitAll(ctx, settled, time.Now(), 3*time.Minute, failed); err != nil {
		return fail(fmt.Errorf("failover: pipeline never produced on every partition: %w", err))
	}
	if err := wait.Sleep(ctx, opts.Warmup); err != nil {
		return fail(err)
	}
	type fault struct {
		kind   string
		broker int32 // for a controlled shutdown; a kill finds its target
	}
	faults := []fault{{kind: "partition leader"}, {kind: "transaction coordinator"}, {kind: "group coordinator"}}
	if opts.Rolling {
		for _, id := range c.NodeIDs() {
			faults = append(faults, fault{"controlled shutdown", id})
		}
	}
	for _, fl := range faults {
		if err := failed(); err != nil {
			return fail(err)
		}
		id, check := fl.broker, movedCheck(allMoved)
		if fl.kind != "controlled shutdown" {
			if id, check, err = target(ctx, adm, fl.kind); err != nil {
				return fail(err)
			}
		}
		f, err := inject(ctx, c, admCl, prog, opts, fl.kind, id, check, failed)
		if err != nil {
			return fail(err)
		}
		rep.Faults = append(rep.Faults, f)
		rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		err = c.Restart(rctx, id)
		cancel()
		if err != nil {
			return fail(err)
		}
		// As an operator rolling brokers does, wait until the broker has
		// caught up on every partition: a partition still short of it has
		// only two in-sync replicas, and the next fault would leave it
		// one, below min.insync.replicas, refusing writes until the
		// restarted broker caught up. That stall is the cluster's, not a
		// failover's.
		if err := waitInSync(ctx, admCl, 3*time.Minute); err != nil {
			return fail(err)
		}
		opts.Logf("broker %d back and in sync on every partition", id)
		if err := wait.Sleep(ctx, opts.Warmup); err != nil {
			return fail(err)
		}
	}
	stopProd()
	<-prodDone
	if err := failed(); err != nil {
		return fail(err)
	}

	in, err := readInput(ctx, c.Addrs(), prod.abortedIDs())
	if err != nil {
		return fail(err)
	}
	want := len(in.Ordered)
	for _, n := range in.Payments {
		want += n
	}
	opts.Logf("producer stopped: %d orders, %d settlements expected; draining", len(in.Ordered), want)
	outs, err := readOutputs(ctx, c.Addrs(), want, opts.Drain)
	stopAll()
	wg.Wait()
	if err := failed(); err != nil {
		return rep, err
	}
	if err != nil {
		return rep, err
	}
	rep.Orders, rep.Aborted, rep.Outputs = len(in.Ordered), len(in.Aborted), len(outs)
	rep.Payments = want - len(in.Ordered)
	rep.Violations = Check(in, outs)
	rep.Elapsed = time.Since(began)
	return rep, nil
}

// inject kills (or, for a controlled shutdown, stops) broker id, watches
// the surviving brokers for the move check looks for and for every
// leadership leaving the broker, and waits until every input and output
// partition has progressed again.
func inject(ctx context.Context, c *testkafka.Cluster, cl *kgo.Client, prog *progress, opts Options, kind string, id int32, check movedCheck, failed func() error) (Fault, error) {
	f := Fault{Kind: kind, Broker: id}
	var survivors []int32
	for _, n := range c.NodeIDs() {
		if n != id {
			survivors = append(survivors, n)
		}
	}
	wctx, stopWatch := context.WithTimeout(ctx, opts.StallLimit)
	defer stopWatch()
	var elected, moved time.Time
	var watchers sync.WaitGroup
	watchers.Go(func() { elected = watchMoved(wctx, cl, survivors, id, check) })
	watchers.Go(func() { moved = watchMoved(wctx, cl, survivors, id, allMoved) })
	var stopped chan error
	killed := time.Now()
	if kind == "controlled shutdown" {
		opts.Logf("stopping broker %d (SIGTERM, controlled shutdown)", id)
		stopped = make(chan error, 1)
		go func() {
			sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			stopped <- c.Stop(sctx, id)
		}()
	} else {
		opts.Logf("killing broker %d, the %s", id, kind)
		if err := c.Kill(id); err != nil {
			return f, err
		}
	}
	for _, topic := range []string{orders, payments, settled} {
		if err := prog.waitAll(ctx, topic, killed, opts.StallLimit, failed); err != nil {
			return f, fmt.Errorf("failover: after the %s of broker %d: %s: %w", kind, id, topic, err)
		}
	}
	watchers.Wait()
	if stopped != nil {
		if err := <-stopped; err != nil {
			return f, err
		}
	}
	since := func(t time.Time) time.Duration {
		if t.IsZero() {
			return 0
		}
		return t.Sub(killed)
	}
	f.Elected, f.Moved = since(elected), since(moved)
	f.Input = max(prog.stallSince(orders, killed), prog.stallSince(payments, killed))
	f.Output = prog.partitionStalls(settled, killed)
	f.Stall = prog.stallSince(settled, killed)
	opts.Logf("%s of broker %d: elected after %s, every leadership moved after %s, input back after %s, every output partition after %s %v",
		kind, id, f.Elected.Round(time.Millisecond), f.Moved.Round(time.Millisecond), f.Input.Round(time.Millisecond),
		f.Stall.Round(time.Millisecond), roundAll(f.Output))
	return f, nil
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// clientLog returns the option that logs a client at debug level to w,
// each line prefixed with the time and name, or none if w is nil.
func clientLog(w io.Writer, name string) []kgo.Opt {
	if w == nil {
		return nil
	}
	return []kgo.Opt{kgo.WithLogger(kgo.BasicLogger(w, kgo.LogLevelDebug, func() string {
		return time.Now().Format("15:04:05.000000 ") + name + " "
	}))}
}

// target finds the broker to kill for a kind of fault, and what moving
// away from it means.
func target(ctx context.Context, adm *kadm.Client, kind string) (int32, movedCheck, error) {
	switch kind {
	case "partition leader":
		md, err := adm.Metadata(ctx, orders)
		if err != nil {
			return 0, nil, fmt.Errorf("failover: metadata for %q: %w", orders, err)
		}
		p, ok := md.Topics[orders].Partitions[0]
		if !ok || p.Leader < 0 {
			return 0, nil, fmt.Errorf("failover: %s partition 0 has no leader", orders)
		}
		return p.Leader, leaderMoved(orders, 0), nil
	case "transaction coordinator":
		txns, err := adm.ListTransactions(ctx, nil, nil)
		if err != nil {
			return 0, nil, fmt.Errorf("failover: list transactions: %w", err)
		}
		for _, tx := range txns.Sorted() {
			if tx.TxnID != producerTxnID {
				return tx.Coordinator, coordinatorMoved(1, tx.TxnID), nil
			}
		}
		return 0, nil, errors.New("failover: no stage transaction listed")
	case "group coordinator":
		r := adm.FindGroupCoordinators(ctx, appID)[appID]
		if r.Err != nil {
			return 0, nil, fmt.Errorf("failover: coordinator of group %q: %w", appID, r.Err)
		}
		return r.NodeID, coordinatorMoved(0, appID), nil
	}
	return 0, nil, fmt.Errorf("failover: unknown fault %q", kind)
}

// progress follows the source and output topics and remembers, per
// partition, when new committed records arrived.
type progress struct {
	mu       sync.Mutex
	arrivals map[string][][]time.Time // topic → partition → poll times that brought records
	n        atomic.Int64             // settlements read
}

func newProgress(partitions int32) *progress {
	p := &progress{arrivals: make(map[string][][]time.Time)}
	for _, t := range []string{orders, payments, settled} {
		p.arrivals[t] = make([][]time.Time, partitions)
	}
	return p
}

func (p *progress) follow(ctx context.Context, addrs []string) {
	// The follower is a client too: with franz-go's defaults it would
	// learn of a new leader up to 5 s late and add that to every stall.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(orders, payments, settled),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.MetadataMinAge(20*time.Millisecond), kgo.RetryBackoffFn(func(int) time.Duration { return 20 * time.Millisecond }),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return
	}
	defer cl.Close()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		now := time.Now()
		p.mu.Lock()
		fs.EachPartition(func(ftp kgo.FetchTopicPartition) {
			parts := p.arrivals[ftp.Topic]
			if len(ftp.Records) == 0 || int(ftp.Partition) >= len(parts) {
				return
			}
			parts[ftp.Partition] = append(parts[ftp.Partition], now)
			if ftp.Topic == settled {
				p.n.Add(int64(len(ftp.Records)))
			}
		})
		p.mu.Unlock()
	}
}

// waitAll waits until every partition of topic has records read after
// since. It gives up early with the error failed returns.
func (p *progress) waitAll(ctx context.Context, topic string, since time.Time, limit time.Duration, failed func() error) error {
	deadline := time.Now().Add(limit)
	for {
		if p.stallSince(topic, since) > 0 {
			return nil
		}
		if err := failed(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("some partition made no progress within %v", limit)
		}
		if err := wait.Sleep(ctx, 20*time.Millisecond); err != nil {
			return err
		}
	}
}

// partitionStalls returns, per partition of topic, how long after since
// its first records arrived, 0 for one that has had none yet.
func (p *progress) partitionStalls(topic string, since time.Time) []time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	parts := p.arrivals[topic]
	out := make([]time.Duration, len(parts))
	for i, ts := range parts {
		j, _ := slices.BinarySearchFunc(ts, since, func(a, b time.Time) int { return a.Compare(b) })
		for j < len(ts) && !ts[j].After(since) {
			j++
		}
		if j < len(ts) {
			out[i] = ts[j].Sub(since)
		}
	}
	return out
}

// stallSince returns how long after since the last partition of topic to
// progress did so, or 0 if one has not progressed yet.
func (p *progress) stallSince(topic string, since time.Time) time.Duration {
	var worst time.Duration
	for _, d := range p.partitionStalls(topic, since) {
		if d == 0 {
			return 0
		}
		worst = max(worst, d)
	}
	return worst
}

// waitInSync waits until the cluster's metadata, internal topics included,
// shows every partition led and every replica in sync.
func waitInSync(ctx context.Context, cl *kgo.Client, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		err := inSync(ctx, cl)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("failover: replicas not in sync after %v: %w", limit, err)
		}
		if err := wait.Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

func inSync(ctx context.Context, cl *kgo.Client) error {
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if p.Leader < 0 || len(p.ISR) < len(p.Replicas) {
				name := "?"
				if t.Topic != nil {
					name = *t.Topic
				}
				return fmt.Errorf("%s[%d]: leader %d, in sync %v of %v", name, p.Partition, p.Leader, p.ISR, p.Replicas)
			}
		}
	}
	return nil
}

// waitLed waits until every broker's metadata shows every partition of
// topic led. CreateTopics returns before the brokers have caught up, each
// at its own pace, and the stage's startup check, asking whichever broker,
// would report the topic missing.
func waitLed(ctx context.Context, cl *kgo.Client, topic string, partitions int32) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := ledEverywhere(ctx, cl, topic, partitions)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("failover: topic %q not led everywhere after a minute: %w", topic, err)
		}
		if err := wait.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

func ledEverywhere(ctx context.Context, cl *kgo.Client, topic string, partitions int32) error {
	md, err := kadm.NewClient(cl).BrokerMetadata(ctx)
	if err != nil {
		return err
	}
	for _, b := range md.Brokers {
		req := kmsg.NewPtrMetadataRequest()
		t := kmsg.NewMetadataRequestTopic()
		t.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, t)
		resp, err := req.RequestWith(ctx, cl.Broker(int(b.NodeID)))
		if err != nil {
			return fmt.Errorf("broker %d: %w", b.NodeID, err)
		}
		if len(resp.Topics) != 1 {
			return fmt.Errorf("broker %d: %d topics in the response", b.NodeID, len(resp.Topics))
		}
		rt := resp.Topics[0]
		if err := kerr.ErrorForCode(rt.ErrorCode); err != nil {
			return fmt.Errorf("broker %d: %w", b.NodeID, err)
		}
		if int32(len(rt.Partitions)) != partitions {
			return fmt.Errorf("broker %d: %d partitions", b.NodeID, len(rt.Partitions))
		}
		for _, p := range rt.Partitions {
			if p.Leader < 0 || p.ErrorCode != 0 {
				return fmt.Errorf("broker %d: partition %d not led", b.NodeID, p.Partition)
			}
		}
	}
	return nil
}
