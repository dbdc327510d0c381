package saramaclock_test

import (
	"context"
	"log"

	"github.com/IBM/sarama"
	"github.com/parsley-go/parsley/adapters/saramaclock"
)

// A payment service on sarama: it observes each order it consumes and
// writes a payment stamped with it, waiting for each acknowledgement.
// Beyond the business logic there is the client's own configuration and
// the clock. (Not run: it needs a cluster.)
func Example() {
	ctx := context.Background()
	brokers := []string{"localhost:9092"}
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true                    // SendMessage reports offsets
	cfg.Producer.RequiredAcks = sarama.WaitForAll           // fold only durable sends
	cfg.Producer.Partitioner = sarama.NewMurmur2Partitioner // co-partitioned with Kafka's default
	producer, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()
	consumer, err := sarama.NewConsumer(brokers, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	orders, err := consumer.ConsumePartition("orders", 0, sarama.OffsetOldest)
	if err != nil {
		log.Fatal(err)
	}
	defer orders.Close()

	clk, err := saramaclock.New(brokers, cfg) // looks topic IDs up through an admin client it opens when needed
	if err != nil {
		log.Fatal(err)
	}
	for order := range orders.Messages() {
		if err := saramaclock.Observe(ctx, clk, order); err != nil {
			log.Fatal(err)
		}
		pay := &sarama.ProducerMessage{Topic: "payments", Key: sarama.ByteEncoder(order.Key), Value: sarama.StringEncoder("paid")}
		if _, _, err := saramaclock.SendMessage(ctx, clk, producer, pay); err != nil {
			log.Fatal(err) // a failed send, or a *clock.NotFoldedError
		}
	}
}

// A transactional producer sharing its clock with a plain one: the ledger
// entry is written in a transaction, and the notification that announces
// it, from the plain producer, once the transaction committed, so that it
// claims the entry. Sent while the transaction was open, it would be
// refused (*clock.OpenTxnError). (Not run: it needs a cluster.)
func ExampleBeginTxn() {
	ctx := context.Background()
	brokers := []string{"localhost:9092"}
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewMurmur2Partitioner
	plain, err := sarama.NewSyncProducer(brokers, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer plain.Close()
	clk, err := saramaclock.New(brokers, cfg)
	if err != nil {
		log.Fatal(err)
	}

	txCfg := *cfg
	txCfg.Producer.Idempotent = true
	txCfg.Producer.Transaction.ID = "ledger-writer"
	txCfg.Net.MaxOpenRequests = 1
	producer, err := sarama.NewSyncProducer(brokers, &txCfg)
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()

	tx, err := saramaclock.BeginTxn(clk, producer)
	if err != nil {
		log.Fatal(err)
	}
	entry := &sarama.ProducerMessage{Topic: "ledger", Key: sarama.StringEncoder("acct-1"), Value: sarama.StringEncoder("debit 10")}
	if _, _, err := tx.SendMessage(ctx, entry); err != nil {
		if aerr := tx.Abort(); aerr != nil { // nothing of it is claimed
			log.Fatal(aerr)
		}
		log.Fatal(err)
	}
	if err := tx.Commit(); err != nil { // on success the clock claims the entry
		log.Fatal(err)
	}
	note := &sarama.ProducerMessage{Topic: "notifications", Key: sarama.StringEncoder("acct-1"), Value: sarama.StringEncoder("debited")}
	if _, _, err := saramaclock.SendMessage(ctx, clk, plain, note); err != nil { // claims the entry
		log.Fatal(err)
	}
}
