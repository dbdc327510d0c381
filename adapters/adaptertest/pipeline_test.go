package adaptertest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/parsley-go/parsley/adapters/adaptertest"
	"github.com/parsley-go/parsley/clock"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// franzClient is the reference client: franz-go with package clock's own
// API. It is the control every adapter's run is compared with.
type franzClient struct {
	cl    *kgo.Client
	clk   *clock.Clock
	stamp bool
}

func newFranz(stamp bool) func(context.Context, []string) (adaptertest.Client, error) {
	return func(_ context.Context, addrs []string) (adaptertest.Client, error) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
		if err != nil {
			return nil, err
		}
		return &franzClient{cl: cl, clk: clock.New(kadm.NewClient(cl)), stamp: stamp}, nil
	}
}

func (f *franzClient) Produce(ctx context.Context, topic string, key, value []byte) error {
	rec := &kgo.Record{Topic: topic, Key: key, Value: value}
	if f.stamp {
		if err := f.clk.Stamp(ctx, rec); err != nil {
			return err
		}
	}
	if err := f.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return err
	}
	return f.clk.RecordProduced(rec)
}

func (f *franzClient) Consume(ctx context.Context, topic string, n int, handle func(key, value []byte) error) error {
	f.cl.AddConsumeTopics(topic)
	for seen := 0; seen < n; {
		fs := f.cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return err
		}
		for _, r := range fs.Records() {
			if f.stamp {
				if err := f.clk.Observe(r); err != nil {
					return err
				}
			}
			if err := handle(r.Key, r.Value); err != nil {
				return err
			}
			seen++
		}
	}
	return nil
}

func (f *franzClient) Close() error { f.cl.Close(); return nil }

func TestPipelineWithFranzGo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a stage on the embedded broker")
	}
	adaptertest.Test(t, 40, newFranz)
}

// docs:begin franz-go
// placeOrders writes each order in a transaction and, once it committed,
// the order's payment from a plain client sharing the clock.
func placeOrders(ctx context.Context, brokers []string, ids [][]byte) error {
	payments, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer payments.Close()
	orders, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("order-writer"))
	if err != nil {
		return err
	}
	defer orders.Close()
	clk := clock.New(kadm.NewClient(payments))

	for _, id := range ids {
		tx, err := clock.BeginTransaction(clk, orders)
		if err != nil {
			return err
		}
		order := &kgo.Record{Topic: "orders", Key: id, Value: []byte("order")}
		if err := tx.ProduceSync(ctx, order); err != nil {
			return errors.Join(err, tx.Abort(ctx)) // nothing of it is claimed
		}
		if err := tx.Commit(ctx); err != nil { // the clock claims the order from here on
			return errors.Join(err, tx.Abort(ctx))
		}
		payment := &kgo.Record{Topic: "payments", Key: id, Value: []byte("payment")}
		if err := clk.Stamp(ctx, payment); err != nil { // claims the order
			return err
		}
		if err := payments.ProduceSync(ctx, payment).FirstErr(); err != nil {
			return err
		}
		if err := clk.RecordProduced(payment); err != nil {
			return err
		}
	}
	return nil
}

// docs:end franz-go

// clients opens placeOrders' two clients, for the variants of it below.
func clients(brokers []string) (payments, orders *kgo.Client, err error) {
	if payments, err = kgo.NewClient(kgo.SeedBrokers(brokers...)); err != nil {
		return nil, nil, err
	}
	if orders, err = kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("order-writer")); err != nil {
		payments.Close()
		return nil, nil, err
	}
	return payments, orders, nil
}

// placeOrdersUnstamped is placeOrders without the clock.
func placeOrdersUnstamped(ctx context.Context, brokers []string, ids [][]byte) error {
	payments, orders, err := clients(brokers)
	if err != nil {
		return err
	}
	defer payments.Close()
	defer orders.Close()
	for _, id := range ids {
		if err := orders.BeginTransaction(); err != nil {
			return err
		}
		if err := orders.ProduceSync(ctx, &kgo.Record{Topic: "orders", Key: id, Value: []byte("order")}).FirstErr(); err != nil {
			return err
		}
		if err := orders.EndTransaction(ctx, kgo.TryCommit); err != nil {
			return err
		}
		if err := payments.ProduceSync(ctx, &kgo.Record{Topic: "payments", Key: id, Value: []byte("payment")}).FirstErr(); err != nil {
			return err
		}
	}
	return nil
}

func TestTxnDocsPipelineWithFranzGo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a stage on the embedded broker")
	}
	adaptertest.TestService(t, 200, placeOrders, placeOrdersUnstamped)
}

// TestTxnPaymentWhileOrderOpenIsRefusedWithFranzGo: the payment stamped
// through the shared clock while its order's transaction is open is
// refused.
func TestTxnPaymentWhileOrderOpenIsRefusedWithFranzGo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a stage on the embedded broker")
	}
	adaptertest.TestRefused(t, 20, func(ctx context.Context, brokers []string, ids [][]byte) error {
		payments, orders, err := clients(brokers)
		if err != nil {
			return err
		}
		defer payments.Close()
		defer orders.Close()
		clk := clock.New(kadm.NewClient(payments))
		for _, id := range ids {
			tx, err := clock.BeginTransaction(clk, orders)
			if err != nil {
				return err
			}
			if err := tx.ProduceSync(ctx, &kgo.Record{Topic: "orders", Key: id}); err != nil {
				return err
			}
			payment := &kgo.Record{Topic: "payments", Key: id}
			if err := clk.Stamp(ctx, payment); err != nil {
				return errors.Join(err, tx.Abort(ctx))
			}
			if err := payments.ProduceSync(ctx, payment).FirstErr(); err != nil {
				return err
			}
			if err := tx.Commit(ctx); err != nil {
				return err
			}
		}
		return nil
	})
}
