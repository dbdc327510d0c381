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
// No header conversion, no topic-ID code. (Not run: it needs a cluster.)
func Example() {
	ctx := context.Background()
	p, err := kafka.NewProducer(&kafka.ConfigMap{
		"bootstrap.servers": "localhost:9092",
		"partitioner":       "murmur2_random", // co-partitioned with Kafka's default
		"acks":              "all",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer p.Close()
	admin, err := kafka.NewAdminClientFromProducer(p)
	if err != nil {
		log.Fatal(err)
	}
	defer admin.Close()
	c, err := kafka.NewConsumer(&kafka.ConfigMap{"bootstrap.servers": "localhost:9092", "group.id": "payments"})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if err := c.SubscribeTopics([]string{"orders"}, nil); err != nil {
		log.Fatal(err)
	}

	clk := confluentclock.New(admin)
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
		if err := confluentclock.Produce(ctx, clk, p, pay); err != nil {
			log.Fatal(err)
		}
	}
}
