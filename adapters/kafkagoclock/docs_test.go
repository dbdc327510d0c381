package kafkagoclock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/parsley-go/parsley/adapters/adaptertest"
	"github.com/parsley-go/parsley/adapters/kafkagoclock"
	"github.com/parsley-go/parsley/clock"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The region between the docs markers is docs/plain-clients.md's kafka-go
// block, line for line (adaptertest's TestDocsBlocksMatchTheirTests holds
// them equal); TestTxnDocsPipeline runs it.

// docs:begin kafka-go
// placeOrders writes each order in a franz-go transaction (kafka-go has
// none) and, once it committed, the order's payment with kafka-go, sharing
// one clock.
func placeOrders(ctx context.Context, brokers []string, ids [][]byte) error {
	clk, err := kafkagoclock.New(brokers) // topic IDs through an admin client it opens when needed
	if err != nil {
		return err
	}
	payments := &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Balancer:     &kafka.Murmur2Balancer{}, // co-partitioning with Kafka's default
		BatchSize:    1,                        // send-await-fold without waiting BatchTimeout
		RequiredAcks: kafka.RequireAll,         // offsets come back
	}
	defer payments.Close()
	orders, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("order-writer"))
	if err != nil {
		return err
	}
	defer orders.Close()

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
		payment := kafka.Message{Topic: "payments", Key: id, Value: []byte("payment")}
		if _, _, err := kafkagoclock.WriteMessage(ctx, clk, payments, &payment); err != nil { // claims the order
			return err
		}
	}
	return nil
}

// docs:end kafka-go

// writers opens placeOrders' kafka-go writer and franz-go transactional
// client, for the variants of it below.
func writers(brokers []string) (payments *kafka.Writer, orders *kgo.Client, closeAll func(), err error) {
	orders, err = kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("order-writer"))
	if err != nil {
		return nil, nil, nil, err
	}
	payments = &kafka.Writer{Addr: kafka.TCP(brokers...), Balancer: &kafka.Murmur2Balancer{}, BatchSize: 1, RequiredAcks: kafka.RequireAll}
	return payments, orders, func() { payments.Close(); orders.Close() }, nil
}

// placeOrdersUnstamped is placeOrders without the clock.
func placeOrdersUnstamped(ctx context.Context, brokers []string, ids [][]byte) error {
	payments, orders, closeAll, err := writers(brokers)
	if err != nil {
		return err
	}
	defer closeAll()
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
		if err := payments.WriteMessages(ctx, kafka.Message{Topic: "payments", Key: id, Value: []byte("payment")}); err != nil {
			return err
		}
	}
	return nil
}

// TestTxnDocsPipeline runs the docs' service through the order/payment
// pipeline: orders in franz-go transactions, payments from kafka-go, a
// stage downstream. No payment may reach the stage before its order, and
// none may be lost.
func TestTxnDocsPipeline(t *testing.T) {
	adaptertest.TestService(t, 200, placeOrders, placeOrdersUnstamped)
}

// TestTxnPaymentWhileOrderOpenIsRefused: a kafka-go payment written while
// its order's transaction is open is refused, naming the order.
func TestTxnPaymentWhileOrderOpenIsRefused(t *testing.T) {
	adaptertest.TestRefused(t, 20, func(ctx context.Context, brokers []string, ids [][]byte) error {
		clk, err := kafkagoclock.New(brokers)
		if err != nil {
			return err
		}
		payments, orders, closeAll, err := writers(brokers)
		if err != nil {
			return err
		}
		defer closeAll()
		for _, id := range ids {
			tx, err := clock.BeginTransaction(clk, orders)
			if err != nil {
				return err
			}
			if err := tx.ProduceSync(ctx, &kgo.Record{Topic: "orders", Key: id}); err != nil {
				return err
			}
			payment := kafka.Message{Topic: "payments", Key: id}
			if _, _, err := kafkagoclock.WriteMessage(ctx, clk, payments, &payment); err != nil {
				return errors.Join(err, tx.Abort(ctx))
			}
			if err := tx.Commit(ctx); err != nil {
				return err
			}
		}
		return nil
	})
}
