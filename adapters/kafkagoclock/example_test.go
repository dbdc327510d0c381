package kafkagoclock_test

import (
	"context"
	"log"

	"github.com/parsley-go/parsley/adapters/kafkagoclock"
	"github.com/segmentio/kafka-go"
)

// A payment service on kafka-go: it observes each order it reads and
// writes a payment stamped with it, waiting for each acknowledgement.
// Beyond the business logic there is the client's own configuration and
// the clock. (Not run: it needs a cluster.)
func Example() {
	ctx := context.Background()
	brokers := []string{"localhost:9092"}
	clk, err := kafkagoclock.New(brokers) // topic IDs through franz-go's kadm, opened when needed
	if err != nil {
		log.Fatal(err)
	}
	w := &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Balancer:     &kafka.Murmur2Balancer{}, // co-partitioned with Kafka's default
		BatchSize:    1,                        // send-await-fold without waiting for a batch
		RequiredAcks: kafka.RequireAll,
	}
	defer w.Close()
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: brokers, Topic: "orders", Partition: 0})
	defer r.Close()

	for {
		order, err := r.ReadMessage(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if err := kafkagoclock.Observe(ctx, clk, &order); err != nil {
			log.Fatal(err)
		}
		pay := kafka.Message{Topic: "payments", Key: order.Key, Value: []byte("paid")}
		if _, _, err := kafkagoclock.WriteMessage(ctx, clk, w, &pay); err != nil {
			log.Fatal(err) // a failed write, or a *clock.NotFoldedError
		}
	}
}
