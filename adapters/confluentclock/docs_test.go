package confluentclock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/parsley-go/parsley/adapters/adaptertest"
	"github.com/parsley-go/parsley/adapters/confluentclock"
)

// The region between the docs markers is docs/plain-clients.md's
// confluent-kafka-go block, line for line (adaptertest's
// TestDocsBlocksMatchTheirTests holds them equal); TestTxnDocsPipeline
// runs it.

// docs:begin confluent-kafka-go
// placeOrders writes each order in a transaction and, once it committed,
// the order's payment from a plain producer sharing the clock.
func placeOrders(ctx context.Context, brokers []string, ids [][]byte) error {
	conf := kafka.ConfigMap{
		"bootstrap.servers":   strings.Join(brokers, ","),
		"partitioner":         "murmur2_random", // the Java client's: co-partitioning
		"acks":                "all",            // fold only durable sends
		"enable.metrics.push": false,            // client telemetry, which the embedded test broker does not take
	}
	payments, err := kafka.NewProducer(&conf)
	if err != nil {
		return err
	}
	defer payments.Close()

	txConf := kafka.ConfigMap{"transactional.id": "order-writer"}
	for k, v := range conf {
		txConf[k] = v
	}
	orders, err := kafka.NewProducer(&txConf)
	if err != nil {
		return err
	}
	defer orders.Close()
	if err := orders.InitTransactions(ctx); err != nil {
		return err
	}
	clk, err := confluentclock.New(payments) // topic IDs through the producer
	if err != nil {
		return err
	}

	orderTopic, paymentTopic := "orders", "payments"
	for _, id := range ids {
		tx, err := confluentclock.BeginTransaction(clk, orders)
		if err != nil {
			return err
		}
		order := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &orderTopic, Partition: kafka.PartitionAny}, Key: id, Value: []byte("order")}
		if _, _, err := tx.Produce(ctx, order); err != nil {
			return errors.Join(err, tx.Abort(ctx)) // nothing of it is claimed
		}
		if err := tx.Commit(ctx); err != nil { // the clock claims the order from here on
			return errors.Join(err, tx.Abort(ctx))
		}
		payment := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &paymentTopic, Partition: kafka.PartitionAny}, Key: id, Value: []byte("payment")}
		if _, _, err := confluentclock.Produce(ctx, clk, payments, payment); err != nil { // claims the order
			return err
		}
	}
	return nil
}

// docs:end confluent-kafka-go

// producers opens placeOrders' two producers, for the variants of it
// below: the plain one and the transactional one, its transactions
// initialized.
func producers(ctx context.Context, brokers []string) (payments, orders *kafka.Producer, closeAll func(), err error) {
	conf := kfakeConf(brokers)
	conf["partitioner"] = "murmur2_random"
	conf["acks"] = "all"
	if payments, err = kafka.NewProducer(&conf); err != nil {
		return nil, nil, nil, err
	}
	go drainEvents(payments)
	conf["transactional.id"] = "order-writer"
	if orders, err = kafka.NewProducer(&conf); err != nil {
		payments.Close()
		return nil, nil, nil, err
	}
	go drainEvents(orders)
	closeAll = func() { orders.Close(); payments.Close() }
	if err := orders.InitTransactions(ctx); err != nil {
		closeAll()
		return nil, nil, nil, err
	}
	return payments, orders, closeAll, nil
}

func message(topic string, id []byte) *kafka.Message {
	return &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Key: id, Value: []byte(topic)}
}

// placeOrdersUnstamped is placeOrders without the clock.
func placeOrdersUnstamped(ctx context.Context, brokers []string, ids [][]byte) error {
	payments, orders, closeAll, err := producers(ctx, brokers)
	if err != nil {
		return err
	}
	defer closeAll()
	send := func(p *kafka.Producer, msg *kafka.Message) error {
		reports := make(chan kafka.Event, 1)
		if err := p.Produce(msg, reports); err != nil {
			return err
		}
		select {
		case e := <-reports:
			return e.(*kafka.Message).TopicPartition.Error
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	for _, id := range ids {
		if err := orders.BeginTransaction(); err != nil {
			return err
		}
		if err := send(orders, message("orders", id)); err != nil {
			return err
		}
		if err := orders.CommitTransaction(ctx); err != nil {
			return err
		}
		if err := send(payments, message("payments", id)); err != nil {
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

// TestTxnPaymentWhileOrderOpenIsRefused: a payment produced while its
// order's transaction is open is refused, naming the order.
func TestTxnPaymentWhileOrderOpenIsRefused(t *testing.T) {
	adaptertest.TestRefused(t, 20, func(ctx context.Context, brokers []string, ids [][]byte) error {
		payments, orders, closeAll, err := producers(ctx, brokers)
		if err != nil {
			return err
		}
		defer closeAll()
		clk, err := confluentclock.New(payments)
		if err != nil {
			return err
		}
		for _, id := range ids {
			tx, err := confluentclock.BeginTransaction(clk, orders)
			if err != nil {
				return err
			}
			if _, _, err := tx.Produce(ctx, message("orders", id)); err != nil {
				return err
			}
			if _, _, err := confluentclock.Produce(ctx, clk, payments, message("payments", id)); err != nil {
				return errors.Join(err, tx.Abort(ctx))
			}
			if err := tx.Commit(ctx); err != nil {
				return err
			}
		}
		return nil
	})
}
