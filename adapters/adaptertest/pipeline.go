// Package adaptertest checks an adapter of package clock for a Kafka client
// library end to end: it runs an order/payment pipeline through the client
// on an embedded broker (franz-go's kfake), with a Parsley stage
// downstream, and counts payments the stage delivered before their order.
//
// The pipeline is the smallest one where causal order can break:
//
//	order producer ─► orders ─┬─► payment service ─► payments ─┐
//	                          └────────────────────────────────┴─► settlement stage
//
// The order producer (the client under test) writes each order, waits for
// the acknowledgement and folds it. The payment service (the client under
// test) consumes the orders read_uncommitted, observes each and writes a
// stamped payment for it. Before any order is written, a franz-go
// transaction is opened on every orders partition and left open, so the
// stage (read_committed) cannot see the orders while the payments are
// already visible: an unstamped payment is delivered early, a stamped one
// is held until the transaction aborts and its order is delivered.
//
// A Service instead writes both orders and payments itself, as one service
// would: each order in a transaction and, after it, the payment from a
// plain producer sharing the clock (TestService). TestRefused checks that a
// payment sent while its order's transaction is open is refused. The
// broker is the real-Kafka tier's cluster when PARSLEY_TEST_BROKERS names
// one (docs/testing.md), so the transactions of sarama and librdkafka run
// against Apache Kafka there.
//
// Run reports the early, lost, duplicated and unexpected deliveries,
// judged by the verification kit's shared oracle (internal/rig/oracle) as
// the soaks judge theirs. With stamping on an adapter must give 0 of each;
// with stamping off the same run must report early deliveries, which
// proves the check can fail.
package adaptertest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/oracle"
	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Topic names of the pipeline.
const (
	Orders      = "orders"
	Payments    = "payments"
	Settlements = "settlements"
)

const appID = "adaptertest"

// A Client is the client library under test, wrapped by its adapter. With
// stamping off it sends and reads the same records but neither stamps nor
// observes.
type Client interface {
	// Produce writes one record to topic with the client's partitioner
	// (which must agree with murmur2), waits for the acknowledgement and
	// folds it into the clock, so the next record claims it.
	Produce(ctx context.Context, topic string, key, value []byte) error
	// Consume reads n records of topic, read_uncommitted, from the start
	// of every partition, folds each into the clock, and calls handle
	// with its key and value. It returns once handle has seen n records.
	Consume(ctx context.Context, topic string, n int, handle func(key, value []byte) error) error
	// Close releases the client.
	Close() error
}

// A Service writes every pair itself, as one service does: for each key,
// in order, the order to Orders and then the order's payment to Payments —
// the orders in transactions and the payments from a plain producer, say,
// sharing one clock. It returns once every payment is acknowledged.
type Service func(ctx context.Context, brokers []string, keys [][]byte) error

// Config shapes a run.
type Config struct {
	Pairs      int   // order/payment pairs (default 50)
	Partitions int32 // partitions of every topic (default 2)
	// NewClient builds the client under test against the seed brokers:
	// an order producer, and a payment service that reads the orders.
	NewClient func(ctx context.Context, brokers []string) (Client, error)
	// Service, instead of NewClient, writes the orders and payments
	// itself.
	Service Service
	// Logger receives the stage's log (default: discarded).
	Logger *slog.Logger
}

// Result counts what the settlement stage delivered.
type Result struct {
	Pairs      int
	Early      int // payments delivered before their order
	Lost       int // pairs without both an order and a payment settled
	Duplicated int // settlements beyond one per order and one per payment
	// Unexpected counts settlements of a key no pair has: the stage
	// settled something the pipeline never wrote.
	Unexpected int
	// OutOfOrder counts orders settled after their payment, as the
	// settlements topic orders them; it must agree with Early, the
	// stage's own view of the same break.
	OutOfOrder int
	// Misplaced counts orders and payments not on the partition murmur2
	// of their key gives: the client's partitioner disagrees with Kafka's
	// default, and co-partitioned stages will not see causes across it.
	Misplaced int
}

func (r Result) String() string {
	return fmt.Sprintf("%d pairs: %d early, %d out of order, %d lost, %d duplicated, %d unexpected, %d misplaced",
		r.Pairs, r.Early, r.OutOfOrder, r.Lost, r.Duplicated, r.Unexpected, r.Misplaced)
}

// Run runs the pipeline once on a new embedded broker and reports what the
// stage delivered.
func Run(ctx context.Context, cfg Config) (Result, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	res, err := run(ctx, cancel, cfg)
	if cause := context.Cause(ctx); err != nil && cause != nil && !errors.Is(err, cause) {
		err = fmt.Errorf("%w (%w)", err, cause)
	}
	return res, err
}

func run(ctx context.Context, fail context.CancelCauseFunc, cfg Config) (Result, error) {
	if cfg.Pairs <= 0 {
		cfg.Pairs = 50
	}
	if cfg.Partitions <= 0 {
		cfg.Partitions = 2
	}
	if (cfg.NewClient == nil) == (cfg.Service == nil) {
		return Result{}, errors.New("adaptertest: set one of NewClient and Service")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	// The embedded broker, or the real-Kafka tier's cluster when
	// PARSLEY_TEST_BROKERS names one (docs/testing.md).
	compact := "compact"
	topics := []broker.Topic{{Name: Orders}, {Name: Payments}, {Name: Settlements},
		{Name: stage.ChangelogTopic(appID, "settlement"), Configs: map[string]*string{"cleanup.policy": &compact}}}
	for i := range topics {
		topics[i].Partitions = cfg.Partitions
	}
	cluster, err := broker.Start(ctx, broker.Topics(topics...))
	if err != nil {
		return Result{}, fmt.Errorf("adaptertest: start broker: %w", err)
	}
	defer cluster.Close()
	addrs := cluster.Addrs()
	adm := cluster.Admin()

	dir, err := os.MkdirTemp("", "parsley-adaptertest-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	seen := newPaymentCount()
	app, err := stage.New(stage.Config{
		ApplicationID:      appID,
		InstanceID:         "instance-1",
		Brokers:            addrs,
		StateDir:           filepath.Join(dir, "state"),
		PollInterval:       50 * time.Millisecond,
		SessionTimeout:     6 * time.Second,
		RebalanceTimeout:   6 * time.Second,
		TransactionTimeout: 10 * time.Second,
		Logger:             cfg.Logger,
	}, settlementStage(seen))
	if err != nil {
		return Result{}, err
	}
	// The stage runs until Run returns; if it stops early, so does Run.
	runCtx, stop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- app.Run(runCtx) }()
	defer func() { stop(); <-runErr }()
	go func() {
		select {
		case err := <-runErr:
			runErr <- err // for the deferred wait
			fail(fmt.Errorf("adaptertest: the stage stopped: %w", err))
		case <-runCtx.Done():
		}
	}()

	blocker, err := block(ctx, addrs, cfg.Partitions)
	if err != nil {
		return Result{}, err
	}
	defer blocker.Close()

	if cfg.Service != nil {
		keys := make([][]byte, cfg.Pairs)
		for i := range keys {
			keys[i] = key(i)
		}
		if err := cfg.Service(ctx, addrs, keys); err != nil {
			return Result{}, fmt.Errorf("adaptertest: service: %w", err)
		}
	} else if err := drive(ctx, cfg, addrs); err != nil {
		return Result{}, err
	}
	// Every partition's payments are now either held by the stage or
	// delivered early; only then may the orders become visible.
	if err := waitHeldOrSettled(ctx, app, adm, seen); err != nil {
		return Result{}, err
	}
	if err := blocker.EndTransaction(ctx, kgo.TryAbort); err != nil {
		return Result{}, fmt.Errorf("adaptertest: abort the blocking transaction: %w", err)
	}

	res, err := settle(ctx, addrs, cfg.Pairs)
	if err != nil {
		return res, err
	}
	res.Misplaced, err = misplaced(ctx, addrs, cfg.Pairs)
	return res, err
}

type account struct{ Ordered bool }

// settlementStage folds orders and payments per key and writes one
// settlement for each: "order", "payment", or "EARLY" for a payment that
// arrived before its order.
func settlementStage(seen *paymentCount) *stage.Stage {
	ordersT := stage.NewTopic(Orders, stage.String(), stage.String())
	paymentsT := stage.NewTopic(Payments, stage.String(), stage.String())
	settlementsT := stage.NewTopic(Settlements, stage.String(), stage.String())
	b := stage.WithState(stage.Named("settlement"), stage.JSON[account](), account{})
	stage.OnFold(b, ordersT, func(a account, m stage.Message[string, string]) (stage.Step[account], error) {
		a.Ordered = true
		return stage.Next(a, settlementsT.Send(m.Key, "order")), nil
	})
	stage.OnFold(b, paymentsT, func(a account, m stage.Message[string, string]) (stage.Step[account], error) {
		seen.add(m.Partition, m.Offset)
		if !a.Ordered {
			return stage.Next(a, settlementsT.Send(m.Key, "EARLY")), nil
		}
		return stage.Next(a, settlementsT.Send(m.Key, "payment")), nil
	})
	return b.Into(settlementsT).MustBuild()
}

// block opens a transaction with one record on every orders partition and
// leaves it open: read_committed consumers see nothing of orders past it.
func block(ctx context.Context, addrs []string, partitions int32) (*kgo.Client, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.TransactionalID(appID+"-blocker"),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionTimeout(60*time.Second))
	if err != nil {
		return nil, err
	}
	if err := cl.BeginTransaction(); err != nil {
		cl.Close()
		return nil, err
	}
	for p := range partitions {
		rec := &kgo.Record{Topic: Orders, Partition: p, Key: []byte(blockerKey), Value: []byte("blocker")}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			cl.Close()
			return nil, fmt.Errorf("adaptertest: open the blocking transaction on %s/%d: %w", Orders, p, err)
		}
	}
	return cl, nil
}

const blockerKey = "adaptertest-blocker"

// settleWait bounds the wait for settlements once the orders are visible.
const settleWait = 30 * time.Second

// drive writes the orders, then runs the payment service over them.
func drive(ctx context.Context, cfg Config, addrs []string) error {
	producer, err := cfg.NewClient(ctx, addrs)
	if err != nil {
		return fmt.Errorf("adaptertest: new order producer: %w", err)
	}
	defer producer.Close()
	for i := range cfg.Pairs {
		if err := producer.Produce(ctx, Orders, key(i), []byte("order")); err != nil {
			return fmt.Errorf("adaptertest: produce order %s: %w", key(i), err)
		}
	}
	service, err := cfg.NewClient(ctx, addrs)
	if err != nil {
		return fmt.Errorf("adaptertest: new payment service: %w", err)
	}
	defer service.Close()
	// The blocker's records are visible read_uncommitted, one per partition.
	n := cfg.Pairs + int(cfg.Partitions)
	return service.Consume(ctx, Orders, n, func(k, _ []byte) error {
		if string(k) == blockerKey {
			return nil
		}
		return service.Produce(ctx, Payments, k, []byte("payment"))
	})
}

func key(i int) []byte { return fmt.Appendf(nil, "order-%04d", i) }

// paymentCount is the highest payment offset the stage delivered per
// partition; a step that aborts may report one twice, which only moves
// the mark where it already was.
type paymentCount struct {
	mu   sync.Mutex
	next map[int32]int64
}

func newPaymentCount() *paymentCount { return &paymentCount{next: map[int32]int64{}} }

func (c *paymentCount) add(p int32, offset int64) {
	c.mu.Lock()
	c.next[p] = max(c.next[p], offset+1)
	c.mu.Unlock()
}

func (c *paymentCount) reached(p int32, end int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.next[p] >= end
}

// waitHeldOrSettled waits until, on every payments partition with records,
// the stage either holds a payment or has delivered the last one.
func waitHeldOrSettled(ctx context.Context, app *stage.App, adm *kadm.Client, seen *paymentCount) error {
	ends, err := adm.ListEndOffsets(ctx, Payments)
	if err != nil {
		return fmt.Errorf("adaptertest: payments end offsets: %w", err)
	}
	for ctx.Err() == nil {
		held := map[int32]bool{}
		for _, h := range app.ExplainHolds() {
			if h.Topic == Payments {
				held[h.Coordinate.Partition] = true
			}
		}
		done := true
		ends.Each(func(o kadm.ListedOffset) {
			if o.Offset > 0 && !held[o.Partition] && !seen.reached(o.Partition, o.Offset) {
				done = false
			}
		})
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Millisecond):
		}
	}
	return fmt.Errorf("adaptertest: the stage neither held nor delivered every payment: %w", context.Cause(ctx))
}

// settle reads the stage's settlements, read_committed, and judges them
// with the verification kit's shared oracle (internal/rig/oracle): each
// pair's order and payment must be settled exactly once, the order first
// (lane the key, rank 0 for the order, 1 for the payment). Early is the
// stage's own view of the same break, from the settlement's value.
func settle(ctx context.Context, addrs []string, pairs int) (Result, error) {
	res := Result{Pairs: pairs}
	// A lost settlement never arrives: wait a bounded time, then count
	// what did.
	readCtx, cancel := context.WithTimeout(ctx, settleWait)
	defer cancel()
	recs, err := readAll(readCtx, addrs, Settlements, 2*pairs, kgo.ReadCommitted())
	if err != nil && (ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded)) {
		return res, err
	}
	ds := make([]oracle.Delivery, 0, len(recs))
	for _, r := range recs {
		kind, rank := "order", int64(0)
		switch string(r.Value) {
		case "order":
		case "EARLY":
			res.Early++
			kind, rank = "payment", 1
		case "payment":
			kind, rank = "payment", 1
		default:
			return res, fmt.Errorf("adaptertest: unexpected settlement %q for %q", r.Value, r.Key)
		}
		ds = append(ds, oracle.Delivery{
			Source: string(r.Key) + "/" + kind,
			At:     fmt.Sprintf("%s[%d]@%d", r.Topic, r.Partition, r.Offset),
			Lane:   string(r.Key),
			Rank:   rank,
		})
	}
	res.judge(oracle.ExactlyOnceInOrder(truth(pairs), ds))
	return res, nil
}

// truth is the ground truth: every pair's order and payment, each to be
// settled once.
func truth(pairs int) map[string]bool {
	want := make(map[string]bool, 2*pairs)
	for i := range pairs {
		want[string(key(i))+"/order"] = true
		want[string(key(i))+"/payment"] = true
	}
	return want
}

// judge counts the oracle's findings into r: a pair is lost when its order
// or its payment was never settled.
func (r *Result) judge(fs []oracle.Finding) {
	lost := map[string]bool{}
	for _, f := range fs {
		switch f.Kind {
		case oracle.Lost:
			pair, _, _ := strings.Cut(f.Source, "/")
			lost[pair] = true
		case oracle.Duplicated:
			r.Duplicated++
		case oracle.Unexpected:
			r.Unexpected++
		case oracle.Order:
			r.OutOfOrder++
		}
	}
	r.Lost = len(lost)
}

// misplaced counts the orders and payments whose partition is not the one
// Kafka's default partitioner (murmur2) gives their key.
func misplaced(ctx context.Context, addrs []string, pairs int) (int, error) {
	n := 0
	for _, topic := range []string{Orders, Payments} {
		recs, err := readAll(ctx, addrs, topic, pairs, kgo.ReadCommitted())
		if err != nil {
			return 0, err
		}
		parts, err := partitionCount(ctx, addrs, topic)
		if err != nil {
			return 0, err
		}
		murmur2 := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
		for _, r := range recs {
			if int32(murmur2.Partition(r, int(parts))) != r.Partition {
				n++
			}
		}
	}
	return n, nil
}

func partitionCount(ctx context.Context, addrs []string, topic string) (int32, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	td, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil {
		return 0, err
	}
	if err := td.Error(); err != nil {
		return 0, err
	}
	return int32(len(td[topic].Partitions)), nil
}

// readAll reads want records of topic from the start, or fails when the
// context ends first.
func readAll(ctx context.Context, addrs []string, topic string, want int, iso kgo.IsolationLevel) ([]*kgo.Record, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(iso), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	var recs []*kgo.Record
	for len(recs) < want {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return recs, fmt.Errorf("adaptertest: read %s: %d of %d records: %w", topic, len(recs), want, err)
		}
		if err := fs.Err0(); err != nil {
			return recs, fmt.Errorf("adaptertest: read %s: %w", topic, err)
		}
		recs = append(recs, fs.Records()...)
	}
	return recs, nil
}

// Test runs the pipeline twice as subtests of t, with stamping on and off,
// through the clients newClient(stamp) builds. It fails t unless the
// stamped run delivers no payment early and loses, duplicates, invents and
// misplaces nothing, and the unstamped run delivers payments early — the
// proof that the check can fail. In both runs the oracle's order findings
// must match the stage's EARLY marks.
func Test(t *testing.T, pairs int, newClient func(stamp bool) func(ctx context.Context, brokers []string) (Client, error)) {
	for _, stamp := range []bool{true, false} {
		name := map[bool]string{true: "stamped", false: "unstamped"}[stamp]
		t.Run(name, func(t *testing.T) {
			check(t, name, stamp, Config{Pairs: pairs, NewClient: newClient(stamp)})
		})
	}
}

// TestService is Test for services: stamped is written from the docs and
// must deliver no payment early and lose nothing; unstamped is the same
// service with the clock left out, and must deliver payments early.
func TestService(t *testing.T, pairs int, stamped, unstamped Service) {
	t.Run("stamped", func(t *testing.T) { check(t, "stamped", true, Config{Pairs: pairs, Service: stamped}) })
	t.Run("unstamped", func(t *testing.T) { check(t, "unstamped", false, Config{Pairs: pairs, Service: unstamped}) })
}

// TestRefused runs the pipeline with a service that sends a payment while
// its order's transaction is still open, through the clock the transaction
// was begun on. The payment's stamp could not claim the order, so the run
// must fail with a *clock.OpenTxnError naming an order; a run that goes
// through instead reports its early and lost payments in the failure.
func TestRefused(t *testing.T, pairs int, svc Service) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{Pairs: pairs, Service: svc})
	var ote *clock.OpenTxnError
	if !errors.As(err, &ote) {
		t.Fatalf("a payment sent while its order's transaction is open: run ended with %v (%v); want an *OpenTxnError", err, res)
	}
	if ote.Topic != Payments || len(ote.Sends) == 0 || ote.Sends[0].Topic != Orders {
		t.Fatalf("refused with %v; want the payment refused, naming the open order", err)
	}
	t.Log(err)
}

func check(t *testing.T, name string, stamp bool, cfg Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res)
	if res.Lost != 0 || res.Duplicated != 0 || res.Unexpected != 0 || res.Misplaced != 0 {
		t.Fatalf("%s: %v; want none lost, duplicated, unexpected or misplaced", name, res)
	}
	if res.OutOfOrder != res.Early {
		t.Fatalf("%s: %v; the settlements' order and the stage's EARLY marks disagree", name, res)
	}
	if stamp && res.Early != 0 {
		t.Fatalf("stamped: %v; want 0 early", res)
	}
	if !stamp && res.Early == 0 {
		t.Fatalf("unstamped: %v; want early deliveries, or the check cannot fail", res)
	}
}
