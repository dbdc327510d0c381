package failover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parsley-go/parsley/internal/testkafka"
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
	Logf       func(format string, args ...any)
	StageLog   *slog.Logger // the stage instances' logger (default: discard)
}

func (o *Options) defaults() {
	if o.Partitions <= 0 {
		o.Partitions = 3
	}
	if o.Warmup <= 0 {
		o.Warmup = 10 * time.Second
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

// Fault is one broker killed and restarted.
type Fault struct {
	Kind   string // "partition leader", "transaction coordinator", "group coordinator"
	Broker int32
	// Stall is how long after the kill every output partition had
	// progressed again.
	Stall time.Duration
}

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
			SessionTimeout:     6 * time.Second,
			RebalanceTimeout:   10 * time.Second,
			TransactionTimeout: 20 * time.Second,
			Logger:             opts.StageLog.With("instance", inst),
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

	prod := &producer{adm: adm, addrs: c.Addrs(), partitions: opts.Partitions, logf: opts.Logf}
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
	if err := prog.waitAll(ctx, time.Now(), 3*time.Minute, failed); err != nil {
		return fail(fmt.Errorf("failover: pipeline never produced on every partition: %w", err))
	}
	if err := wait.Sleep(ctx, opts.Warmup); err != nil {
		return fail(err)
	}
	for _, kind := range []string{"partition leader", "transaction coordinator", "group coordinator"} {
		if err := failed(); err != nil {
			return fail(err)
		}
		id, err := target(ctx, adm, kind)
		if err != nil {
			return fail(err)
		}
		opts.Logf("killing broker %d, the %s", id, kind)
		killed := time.Now()
		if err := c.Kill(id); err != nil {
			return fail(err)
		}
		if err := prog.waitAll(ctx, killed, opts.StallLimit, failed); err != nil {
			return fail(fmt.Errorf("failover: after killing broker %d (%s): %w", id, kind, err))
		}
		stall := prog.stallSince(killed)
		rep.Faults = append(rep.Faults, Fault{Kind: kind, Broker: id, Stall: stall})
		opts.Logf("every output partition progressed %s after the kill", stall.Round(10*time.Millisecond))
		rctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		err = c.Restart(rctx, id)
		cancel()
		if err != nil {
			return fail(err)
		}
		opts.Logf("broker %d back", id)
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

// target finds the broker to kill for a kind of fault.
func target(ctx context.Context, adm *kadm.Client, kind string) (int32, error) {
	switch kind {
	case "partition leader":
		md, err := adm.Metadata(ctx, orders)
		if err != nil {
			return 0, fmt.Errorf("failover: metadata for %q: %w", orders, err)
		}
		p, ok := md.Topics[orders].Partitions[0]
		if !ok || p.Leader < 0 {
			return 0, fmt.Errorf("failover: %s partition 0 has no leader", orders)
		}
		return p.Leader, nil
	case "transaction coordinator":
		txns, err := adm.ListTransactions(ctx, nil, nil)
		if err != nil {
			return 0, fmt.Errorf("failover: list transactions: %w", err)
		}
		for _, tx := range txns.Sorted() {
			if tx.TxnID != producerTxnID {
				return tx.Coordinator, nil
			}
		}
		return 0, errors.New("failover: no stage transaction listed")
	case "group coordinator":
		r := adm.FindGroupCoordinators(ctx, appID)[appID]
		if r.Err != nil {
			return 0, fmt.Errorf("failover: coordinator of group %q: %w", appID, r.Err)
		}
		return r.NodeID, nil
	}
	return 0, fmt.Errorf("failover: unknown fault %q", kind)
}

// progress follows the output topic and remembers, per partition, when a
// new settlement last arrived.
type progress struct {
	mu   sync.Mutex
	last []time.Time // per partition: when the newest settlement was read
	n    atomic.Int64
}

func newProgress(partitions int32) *progress {
	return &progress{last: make([]time.Time, partitions)}
}

func (p *progress) follow(ctx context.Context, addrs []string) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(settled),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return
	}
	defer cl.Close()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		now := time.Now()
		p.mu.Lock()
		fs.EachRecord(func(r *kgo.Record) {
			if int(r.Partition) < len(p.last) {
				p.last[r.Partition] = now
			}
			p.n.Add(1)
		})
		p.mu.Unlock()
	}
}

// waitAll waits until every partition has a settlement read after since.
// It gives up early with the error failed returns.
func (p *progress) waitAll(ctx context.Context, since time.Time, limit time.Duration, failed func() error) error {
	deadline := time.Now().Add(limit)
	for {
		if p.stallSince(since) > 0 {
			return nil
		}
		if err := failed(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("some output partition made no progress within %v", limit)
		}
		if err := wait.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// stallSince returns how long after since the last partition to progress
// did so, or 0 if one has not progressed yet.
func (p *progress) stallSince(since time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var worst time.Duration
	for _, t := range p.last {
		if !t.After(since) {
			return 0
		}
		worst = max(worst, t.Sub(since))
	}
	return worst
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
