package saramaclock_test

import (
	"context"
	"log"

	"github.com/IBM/sarama"
	"github.com/parsley-go/parsley/adapters/saramaclock"
)

// A payment service on sarama: it observes each order it consumes and
// writes a payment stamped with it, waiting for each acknowledgement. No
// header conversion, no topic-ID code. (Not run: it needs a cluster.)
func Example() {
	ctx := context.Background()
	brokers := []string{"localhost:9092"}
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true                      // SendMessage reports offsets
	cfg.Producer.RequiredAcks = sarama.WaitForAll             // fold only durable sends
	cfg.Producer.Partitioner = saramaclock.Murmur2Partitioner // co-partitioned with Kafka's default
	admin, err := sarama.NewClusterAdmin(brokers, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer admin.Close()
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

	clk := saramaclock.New(admin)
	for order := range orders.Messages() {
		if err := saramaclock.Observe(ctx, clk, order); err != nil {
			log.Fatal(err)
		}
		pay := &sarama.ProducerMessage{Topic: "payments", Key: sarama.ByteEncoder(order.Key), Value: sarama.StringEncoder("paid")}
		if _, _, err := saramaclock.SendMessage(ctx, clk, producer, pay); err != nil {
			log.Fatal(err)
		}
	}
}
