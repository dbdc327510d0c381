package clock_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
)

// fixedIDs is a clock whose topics "orders", "payments" and "audit" have
// the IDs 1, 2 and 3, without a cluster.
func fixedIDs() *clock.Clock {
	ids := map[string]headers.TopicID{"orders": {1}, "payments": {2}, "audit": {3}}
	return clock.New(nil, clock.TopicIDs(func(_ context.Context, topic string) (headers.TopicID, error) {
		if id, ok := ids[topic]; ok {
			return id, nil
		}
		return headers.TopicID{}, &clock.UnknownTopicError{Topic: topic}
	}))
}

var (
	ordersCh   = headers.Channel{Topic: headers.TopicID{1}}
	paymentsCh = headers.Channel{Topic: headers.TopicID{2}}
	auditCh    = headers.Channel{Topic: headers.TopicID{3}}
)

// stampClaims stamps a record for topic through c and returns what the
// stamp claims, or the stamp's error.
func stampClaims(c *clock.Clock, topic string) (*headers.Clock, error) {
	hs, err := clock.AppendStamp(context.Background(), c, topic, []headers.Header(nil))
	if err != nil {
		return nil, err
	}
	var st headers.Stamp
	if err := headers.ReadStamp(&st, hs); err != nil {
		return nil, err
	}
	return st.Clock.Clone(), nil
}

func mustProduced(t *testing.T, c *clock.Clock, topic string, offset int64) {
	t.Helper()
	if err := c.Produced(context.Background(), topic, 0, offset); err != nil {
		t.Fatal(err)
	}
}

// The case of issue 50: an order sent in an open transaction, then its
// payment from a plain producer sharing the clock. The payment's stamp is
// refused while the order is undecided — it could not claim it — and
// claims it once the transaction committed.
func TestOpenTxnRefusesStampsThatMissItsSends(t *testing.T) {
	ctx := context.Background()
	clk := fixedIDs()
	mustProduced(t, clk, "audit", 4) // a plain send before the transaction

	tx := clk.Begin()
	if _, err := stampClaims(clk, "payments"); err != nil {
		t.Fatalf("a stamp while the transaction holds no send: %v", err)
	}
	mustProduced(t, tx.Clock(), "orders", 7)

	stampers := map[string]func() error{
		"AppendStamp": func() error { _, err := stampClaims(clk, "payments"); return err },
		"Stamp":       func() error { return clk.Stamp(ctx, &kgo.Record{Topic: "payments"}) },
		"StampHeader": func() error { _, _, err := clk.StampHeader(ctx, "payments", nil); return err },
	}
	for name, stamp := range stampers {
		err := stamp()
		var ote *clock.OpenTxnError
		if !errors.As(err, &ote) || !errors.Is(err, clock.ErrOpenTxn) {
			t.Fatalf("%s through the shared clock while the order is in the open transaction: %v; want an *OpenTxnError", name, err)
		}
		want := clock.TxnSend{Topic: "orders", At: headers.Coordinate{Channel: ordersCh, Offset: 7}}
		if ote.Topic != "payments" || len(ote.Sends) != 1 || ote.Sends[0] != want {
			t.Fatalf("%s refused with %+v; want it to name payments and the order %v", name, ote, want)
		}
		if !strings.Contains(err.Error(), `"orders"/0@7`) || !strings.Contains(err.Error(), `"payments"`) {
			t.Fatalf("%s: message %q names neither the order nor the refused topic", name, err)
		}
	}

	// The transaction's own stamps claim its send and the plain one.
	got, err := stampClaims(tx.Clock(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	wantOffset(t, got, ordersCh, 7)
	wantOffset(t, got, auditCh, 4)

	if err := tx.Committed(); err != nil {
		t.Fatal(err)
	}
	got, err = stampClaims(clk, "payments")
	if err != nil {
		t.Fatalf("a stamp after the commit: %v", err)
	}
	wantOffset(t, got, ordersCh, 7)
	wantOffset(t, got, auditCh, 4)
}

// An abort drops the transaction's sends and nothing else: the plain sends
// made before and during it stay claimed, and the refusal ends.
func TestAbortedTxnKeepsPlainSends(t *testing.T) {
	clk := fixedIDs()
	tx := clk.Begin()
	mustProduced(t, clk, "audit", 2) // while open, before the transaction sent anything
	got, err := stampClaims(tx.Clock(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	wantOffset(t, got, auditCh, 2) // the transaction's clock sees the shared clock live
	mustProduced(t, tx.Clock(), "orders", 9)
	if o, ok := clk.Snapshot().Offset(ordersCh); ok {
		t.Fatalf("the shared clock claims orders@%d while the transaction is open", o)
	}
	tx.Aborted()
	tx.Aborted() // a retried abort changes nothing
	got, err = stampClaims(clk, "payments")
	if err != nil {
		t.Fatalf("a stamp after the abort: %v", err)
	}
	if o, ok := got.Offset(ordersCh); ok {
		t.Fatalf("a stamp after the abort claims the aborted send at %d", o)
	}
	wantOffset(t, got, auditCh, 2)
}

// Observing through the transaction's clock folds into the shared clock: a
// consumed record is a cause anyone may claim, and an abort must not
// forget it.
func TestTxnObservesIntoTheSharedClock(t *testing.T) {
	clk := fixedIDs()
	tx := clk.Begin()
	var carried headers.Clock
	carried.SetOffset(paymentsCh, 5)
	vc, err := headers.EncodeVC(&carried)
	if err != nil {
		t.Fatal(err)
	}
	if err := clock.ObserveHeaders(context.Background(), tx.Clock(), "orders", 0, 3, []headers.Header{{Key: headers.HeaderVC, Value: vc}}); err != nil {
		t.Fatal(err)
	}
	tx.Aborted()
	snap := clk.Snapshot()
	wantOffset(t, snap, ordersCh, 3)
	wantOffset(t, snap, paymentsCh, 5)
}

// A second transaction on the same clock may not claim the first's
// undecided sends either.
func TestOtherTxnIsRefusedToo(t *testing.T) {
	clk := fixedIDs()
	a, b := clk.Begin(), clk.Begin()
	mustProduced(t, a.Clock(), "orders", 1)
	if _, err := stampClaims(b.Clock(), "payments"); !errors.Is(err, clock.ErrOpenTxn) {
		t.Fatalf("a stamp through another open transaction: %v; want ErrOpenTxn", err)
	}
	if _, err := stampClaims(a.Clock(), "orders"); err != nil {
		t.Fatalf("the transaction's own stamp: %v", err)
	}
	if err := a.Committed(); err != nil {
		t.Fatal(err)
	}
	got, err := stampClaims(b.Clock(), "payments")
	if err != nil {
		t.Fatal(err)
	}
	wantOffset(t, got, ordersCh, 1)
	b.Aborted()
}

// Once ended, a transaction's clock does nothing but say so, and the
// operations meant for the shared clock are refused on it.
func TestEndedTxnClock(t *testing.T) {
	ctx := context.Background()
	clk := fixedIDs()
	tx := clk.Begin()
	v := tx.Clock()
	if err := v.Merge(new(headers.Clock)); !errors.Is(err, clock.ErrTxnClock) {
		t.Errorf("Merge into a transaction's clock: %v; want ErrTxnClock", err)
	}
	if err := v.Restore(new(headers.Clock)); !errors.Is(err, clock.ErrTxnClock) {
		t.Errorf("Restore of a transaction's clock: %v; want ErrTxnClock", err)
	}
	if tx.Ended() {
		t.Fatal("an open transaction says it ended")
	}
	if err := tx.Committed(); err != nil {
		t.Fatal(err)
	}
	if !tx.Ended() {
		t.Fatal("a committed transaction says it is open")
	}
	if err := tx.Committed(); !errors.Is(err, clock.ErrTxnEnded) {
		t.Errorf("a second Committed: %v; want ErrTxnEnded", err)
	}
	tx.Aborted() // after a commit: nothing
	for name, f := range map[string]func() error{
		"Stamp":    func() error { return v.Stamp(ctx, &kgo.Record{Topic: "orders"}) },
		"Produced": func() error { return v.Produced(ctx, "orders", 0, 1) },
		"Observe":  func() error { return v.ObserveSeq(ctx, "orders", 0, 1, nil) },
		"ObserveStamp": func() error {
			return v.ObserveStamp(headers.Coordinate{Channel: ordersCh, Offset: 1}, new(headers.Stamp))
		},
	} {
		if err := f(); !errors.Is(err, clock.ErrTxnEnded) {
			t.Errorf("%s through an ended transaction's clock: %v; want ErrTxnEnded", name, err)
		}
	}
	if !clk.Snapshot().IsEmpty() {
		t.Errorf("the ended transaction's clock folded %v into the shared clock", clk.Snapshot())
	}
}

// TestTxnStampsUnderConcurrency judges every stamp of the shared clock made
// while transactions begin, send, commit and abort on other goroutines. A
// stamp that succeeded claims every send of a committed transaction whose
// fold returned before the stamp began (it is refused while that
// transaction is open, and comes after its commit otherwise), and no stamp
// ever claims a send of an aborted transaction. Transaction i sends to
// partition i only, so a claim there speaks for it alone. Run with -race,
// it also checks the locking.
func TestTxnStampsUnderConcurrency(t *testing.T) {
	clk := fixedIDs()
	var events atomic.Int64 // orders the folds and the stamps
	type txnLog struct {
		folded    []int64 // event at which the fold of send k returned
		committed bool
	}
	var (
		mu   sync.Mutex
		logs []*txnLog
	)
	begin := func() (int, *txnLog) {
		mu.Lock()
		defer mu.Unlock()
		l := new(txnLog)
		logs = append(logs, l)
		return len(logs) - 1, l
	}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 50))
			for {
				select {
				case <-stop:
					return
				default:
				}
				i, l := begin()
				tx := clk.Begin()
				for k := range rng.IntN(3) {
					if err := tx.Clock().Produced(context.Background(), "orders", int32(i), int64(k)); err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					l.folded = append(l.folded, events.Add(1))
					mu.Unlock()
				}
				for range rng.IntN(20) {
					runtime.Gosched() // let stamps meet the open transaction
				}
				if rng.IntN(3) == 0 {
					tx.Aborted()
					continue
				}
				mu.Lock()
				l.committed = true
				mu.Unlock()
				if err := tx.Committed(); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	type stamp struct {
		start  int64
		claims *headers.Clock
	}
	var stamps []stamp
	refused := 0
	deadline := time.Now().Add(10 * time.Second)
	for (len(stamps) < 500 || refused < 500) && time.Now().Before(deadline) {
		start := events.Add(1)
		got, err := stampClaims(clk, "payments")
		switch {
		case errors.Is(err, clock.ErrOpenTxn):
			refused++
		case err != nil:
			t.Fatal(err)
		default:
			stamps = append(stamps, stamp{start: start, claims: got})
		}
	}
	close(stop)
	wg.Wait()
	if len(stamps) < 500 || refused < 500 {
		t.Fatalf("%d stamps made, %d refused in 10s; the run did not exercise both sides", len(stamps), refused)
	}

	for _, s := range stamps {
		for i, l := range logs {
			claim, ok := s.claims.Offset(headers.Channel{Topic: ordersCh.Topic, Partition: int32(i)})
			if !l.committed {
				if ok {
					t.Fatalf("a stamp claims orders/%d@%d, a send of an aborted transaction", i, claim)
				}
				continue
			}
			want := int64(-1)
			for k, at := range l.folded {
				if at < s.start {
					want = int64(k)
				}
			}
			if want >= 0 && (!ok || claim < want) {
				t.Fatalf("a stamp begun at event %d claims orders/%d@%d (%v); the committed send at %d was folded before it, at event %d",
					s.start, i, claim, ok, want, l.folded[want])
			}
		}
	}
	t.Logf("%d stamps judged, %d refused, over %d transactions", len(stamps), refused, len(logs))
}

// franz-go end to end: a transactional client writes an order through
// BeginTransaction, a plain client shares the clock. The plain payment is
// refused while the order's transaction is open, claims the order once it
// committed; a plain record folded through the transaction's clock is kept
// by the shared clock with a *PlainSendError; an aborted order is never
// claimed.
func TestTransactionWithAPlainProducer(t *testing.T) {
	ctx := testCtx(t)
	c := cluster(t, broker.Topic{Name: "orders"}, broker.Topic{Name: "payments"})
	txc, err := c.NewClient(kgo.TransactionalID("orders-writer"))
	if err != nil {
		t.Fatal(err)
	}
	defer txc.Close()
	clk := clock.New(c.Admin())
	ordersID, paymentsID := topicID(t, c, "orders"), topicID(t, c, "payments")

	tx, err := clock.BeginTransaction(clk, txc)
	if err != nil {
		t.Fatal(err)
	}
	order := &kgo.Record{Topic: "orders", Key: []byte("o-1"), Value: []byte("order")}
	if err := tx.ProduceSync(ctx, order); err != nil {
		t.Fatal(err)
	}
	pay := &kgo.Record{Topic: "payments", Key: []byte("o-1"), Value: []byte("payment")}
	if err := clk.Stamp(ctx, pay); !errors.Is(err, clock.ErrOpenTxn) || len(pay.Headers) != 0 {
		t.Fatalf("stamping the payment while the order's transaction is open: %v, headers %v; want ErrOpenTxn and no stamp", err, pay.Headers)
	}

	// The wrong way round: a plain record stamped and folded through the
	// transaction's clock. The fold says so and keeps the claim.
	stray := &kgo.Record{Topic: "payments", Key: []byte("stray")}
	if err := tx.Clock().Stamp(ctx, stray); err != nil {
		t.Fatal(err)
	}
	stray = produce(t, c, stray)
	var pse *clock.PlainSendError
	if err := tx.Clock().RecordProduced(stray); !errors.As(err, &pse) || !errors.Is(err, clock.ErrPlainSend) || pse.Offset != stray.Offset {
		t.Fatalf("folding a plain record through the transaction's clock: %v; want a *PlainSendError naming it", err)
	}
	wantOffset(t, clk.Snapshot(), ch(paymentsID, 0), stray.Offset)

	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tx.ProduceSync(ctx, &kgo.Record{Topic: "orders"}); !errors.Is(err, clock.ErrTxnEnded) {
		t.Fatalf("ProduceSync after the commit: %v; want ErrTxnEnded", err)
	}
	if err := clk.Stamp(ctx, pay); err != nil {
		t.Fatal(err)
	}
	pay = produce(t, c, pay)
	wantOffset(t, claims(t, pay), ch(ordersID, 0), order.Offset)
	if err := clk.RecordProduced(pay); err != nil {
		t.Fatal(err)
	}

	tx, err = clock.BeginTransaction(clk, txc)
	if err != nil {
		t.Fatal(err)
	}
	aborted := &kgo.Record{Topic: "orders", Key: []byte("o-2")}
	if err := tx.ProduceSync(ctx, aborted); err != nil {
		t.Fatal(err)
	}
	if err := tx.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	late := &kgo.Record{Topic: "payments"}
	if err := clk.Stamp(ctx, late); err != nil {
		t.Fatalf("a stamp after the abort: %v", err)
	}
	got := claims(t, late)
	wantOffset(t, got, ch(ordersID, 0), order.Offset) // not the aborted one after it
	wantOffset(t, got, ch(paymentsID, 0), pay.Offset)
	if aborted.Offset <= order.Offset {
		t.Fatalf("the aborted order at %d is not after the committed one at %d; the check above is vacuous", aborted.Offset, order.Offset)
	}
}
