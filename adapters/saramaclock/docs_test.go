package saramaclock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/IBM/sarama"
	"github.com/parsley-go/parsley/adapters/adaptertest"
	"github.com/parsley-go/parsley/adapters/saramaclock"
)

// The region between the docs markers is docs/plain-clients.md's sarama
// block, line for line (adaptertest's TestDocsBlocksMatchTheirTests holds
// them equal); TestTxnDocsPipeline runs it.

// docs:begin sarama
// placeOrders writes each order in a transaction and, once it committed,
// the order's payment from a plain producer sharing the clock.
func placeOrders(ctx context.Context, brokers []string, ids [][]byte) error {
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true                    // SendMessage reports offsets
	cfg.Producer.RequiredAcks = sarama.WaitForAll           // fold only durable sends
	cfg.Producer.Partitioner = sarama.NewMurmur2Partitioner // co-partitioning with Kafka's default
	clk, err := saramaclock.New(brokers, cfg)               // topic IDs through an admin client it opens when needed
	if err != nil {
		return err
	}
	payments, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		return err
	}
	defer payments.Close()

	txCfg := *cfg
	txCfg.Producer.Idempotent = true
	txCfg.Producer.Transaction.ID = "order-writer"
	txCfg.Net.MaxOpenRequests = 1
	orders, err := sarama.NewSyncProducer(brokers, &txCfg)
	if err != nil {
		return err
	}
	defer orders.Close()

	for _, id := range ids {
		tx, err := saramaclock.BeginTxn(clk, orders)
		if err != nil {
			return err
		}
		order := &sarama.ProducerMessage{Topic: "orders", Key: sarama.ByteEncoder(id), Value: sarama.StringEncoder("order")}
		if _, _, err := tx.SendMessage(ctx, order); err != nil {
			return errors.Join(err, tx.Abort()) // nothing of it is claimed
		}
		if err := tx.Commit(); err != nil { // the clock claims the order from here on
			return errors.Join(err, tx.Abort())
		}
		payment := &sarama.ProducerMessage{Topic: "payments", Key: sarama.ByteEncoder(id), Value: sarama.StringEncoder("payment")}
		if _, _, err := saramaclock.SendMessage(ctx, clk, payments, payment); err != nil { // claims the order
			return err
		}
	}
	return nil
}

// docs:end sarama

// producers opens placeOrders' two producers, for the variants of it
// below: the plain one and the transactional one.
func producers(brokers []string) (payments, orders sarama.SyncProducer, closeAll func(), err error) {
	cfg := producerConfig()
	if payments, err = sarama.NewSyncProducer(brokers, cfg); err != nil {
		return nil, nil, nil, err
	}
	txCfg := *cfg
	txCfg.Producer.Idempotent = true
	txCfg.Producer.Transaction.ID = "order-writer"
	txCfg.Net.MaxOpenRequests = 1
	if orders, err = sarama.NewSyncProducer(brokers, &txCfg); err != nil {
		payments.Close()
		return nil, nil, nil, err
	}
	return payments, orders, func() { orders.Close(); payments.Close() }, nil
}

func message(topic string, id []byte) *sarama.ProducerMessage {
	return &sarama.ProducerMessage{Topic: topic, Key: sarama.ByteEncoder(id), Value: sarama.StringEncoder(topic)}
}

// placeOrdersUnstamped is placeOrders without the clock: the control that
// proves the pipeline's check can fail.
func placeOrdersUnstamped(ctx context.Context, brokers []string, ids [][]byte) error {
	payments, orders, closeAll, err := producers(brokers)
	if err != nil {
		return err
	}
	defer closeAll()
	for _, id := range ids {
		if err := orders.BeginTxn(); err != nil {
			return err
		}
		if _, _, err := orders.SendMessage(message("orders", id)); err != nil {
			return err
		}
		if err := orders.CommitTxn(); err != nil {
			return err
		}
		if _, _, err := payments.SendMessage(message("payments", id)); err != nil {
			return err
		}
	}
	return nil
}

// TestTxnDocsPipeline runs the docs' service through the order/payment
// pipeline: orders in transactions, payments from a plain producer, a
// stage downstream. No payment may reach the stage before its order, and
// none may be lost.
func TestTxnDocsPipeline(t *testing.T) {
	adaptertest.TestService(t, 200, placeOrders, placeOrdersUnstamped)
}

// TestTxnPaymentWhileOrderOpenIsRefused is the pattern issue 50 found
// losing causality: the payment sent while its order's transaction is
// still open. Through the shared clock it could not claim the order, so it
// is refused, naming the order, and nothing is sent.
func TestTxnPaymentWhileOrderOpenIsRefused(t *testing.T) {
	adaptertest.TestRefused(t, 20, func(ctx context.Context, brokers []string, ids [][]byte) error {
		clk, err := saramaclock.New(brokers, producerConfig())
		if err != nil {
			return err
		}
		payments, orders, closeAll, err := producers(brokers)
		if err != nil {
			return err
		}
		defer closeAll()
		for _, id := range ids {
			tx, err := saramaclock.BeginTxn(clk, orders)
			if err != nil {
				return err
			}
			if _, _, err := tx.SendMessage(ctx, message("orders", id)); err != nil {
				return err
			}
			if _, _, err := saramaclock.SendMessage(ctx, clk, payments, message("payments", id)); err != nil {
				return errors.Join(err, tx.Abort())
			}
			if err := tx.Commit(); err != nil {
				return err
			}
		}
		return nil
	})
}
