package confluentclock_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/parsley-go/parsley/adapters/confluentclock"
)

// A payment service on confluent-kafka-go: it observes each order it reads
// and writes a payment stamped with it, waiting for each delivery report.
// Beyond the business logic there is the client's own configuration and
// the clock. (Not run: it needs a cluster.)
func Example() {
	ctx := context.Background()
	conf := &kafka.ConfigMap{
		"bootstrap.servers": "localhost:9092",
		"partitioner":       "murmur2_random", // co-partitioned with Kafka's default
		"acks":              "all",
	}
	p, err := kafka.NewProducer(conf)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	clk, err := confluentclock.New(p) // looks topic IDs up through the producer
	if err != nil {
		log.Fatal(err)
	}
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": "localhost:9092", "group.id": "payments"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := c.SubscribeTopics([]string{"orders"}, nil); err != nil {
		log.Fatal(err)
	}

	payments := "payments"
	for {
		order, err := c.ReadMessage(time.Second)
		var kerr kafka.Error
		if errors.As(err, &kerr) && kerr.IsTimeout() {
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		if err := confluentclock.Observe(ctx, clk, order); err != nil {
			log.Fatal(err)
		}
		pay := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &payments, Partition: kafka.PartitionAny}, Key: order.Key, Value: []byte("paid")}
		if _, _, err := confluentclock.Produce(ctx, clk, p, pay); err != nil {
			log.Fatal(err) // a failed delivery, or a *clock.NotFoldedError
		}
	}
}

// A transactional producer: the transaction stamps and folds through its
// own view of the clock, which joins the clock on commit and is dropped on
// abort. A plain producer sharing the clock sends what follows the entry
// once the transaction committed (while it is open such a send is refused
// with a *clock.OpenTxnError). (Not run: it needs a cluster.)
func ExampleBeginTransaction() {
	ctx := context.Background()
	conf := &kafka.ConfigMap{
		"bootstrap.servers": "localhost:9092",
		"partitioner":       "murmur2_random",
		"transactional.id":  "ledger-writer",
	}
	p, err := kafka.NewProducer(conf)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	if err := p.InitTransactions(ctx); err != nil {
		log.Fatal(err)
	}
	clk, err := confluentclock.New(p)
	if err != nil {
		log.Fatal(err)
	}

	tx, err := confluentclock.BeginTransaction(clk, p)
	if err != nil {
		log.Fatal(err)
	}
	ledger := "ledger"
	entry := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &ledger, Partition: kafka.PartitionAny}, Key: []byte("acct-1"), Value: []byte("debit 10")}
	if _, _, err := tx.Produce(ctx, entry); err != nil {
		if aerr := tx.Abort(ctx); aerr != nil { // nothing of it is claimed
			log.Fatal(aerr)
		}
		log.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil { // on success the clock claims the entry
		log.Fatal(err)
	}
}
