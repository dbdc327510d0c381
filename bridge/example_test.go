package bridge_test

import (
	"context"
	"fmt"
	"log"
	"os/signal"
	"syscall"
	"time"

	"github.com/parsley-go/parsley/bridge"
	"github.com/parsley-go/parsley/stage"
)

func ExampleTemplate() {
	subject, err := bridge.Template("kafka.{topic}.{partition}.{key}")
	if err != nil {
		log.Fatal(err)
	}
	for _, key := range [][]byte{[]byte("order-17"), []byte("a.b"), nil} {
		s, _ := subject("orders", 3, key)
		fmt.Println(s)
	}
	// Output:
	// kafka.orders.3.order-17
	// kafka.orders.3.~YS5i
	// kafka.orders.3.~~
}

// ExampleRun forwards two co-partitioned topics to the stream ORDERS,
// which must capture "shop.>" and keep message IDs for at least the
// redelivery horizon. The changelog topic
// bridge.ChangelogTopic("shop-bridge", "bridge") must exist, compacted.
func ExampleRun() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	subject, err := bridge.Template("shop.{topic}.{key}")
	if err != nil {
		log.Fatal(err)
	}
	err = bridge.Run(ctx, bridge.Config{
		Brokers:       []string{"localhost:9092"},
		ApplicationID: "shop-bridge",
		InstanceID:    "bridge-1",
		StateDir:      "/var/lib/shop-bridge",
		Topics:        []string{"orders", "payments"},
		SinkConfig: bridge.SinkConfig{
			Subject:           subject,
			NATSURL:           "nats://localhost:4222",
			Stream:            "ORDERS",
			RedeliveryHorizon: 5 * time.Minute,
			MaxInFlight:       64,
		},
	})
	if err != nil {
		log.Fatal(err)
	}
}

// ExampleForward forwards "payments" to NATS from a stage that also
// folds "orders" into Kafka records: one transaction covers both.
func ExampleForward() {
	ctx := context.Background()
	subject, _ := bridge.Template("shop.{topic}.{key}")
	sink, err := bridge.NewSink(ctx, bridge.SinkConfig{NATSURL: "nats://localhost:4222", Stream: "ORDERS", Subject: subject})
	if err != nil {
		log.Fatal(err)
	}
	defer sink.Close()
	payments := stage.NewTopic("payments", stage.Bytes(), stage.Bytes())
	orders := stage.NewTopic("orders", stage.String(), stage.String())
	audit := stage.NewTopic("audit", stage.String(), stage.String())
	b := bridge.Forward(stage.Named("shop"), payments, sink)
	stage.On(b, orders, func(m stage.Message[string, string]) ([]stage.Emission, error) {
		return []stage.Emission{audit.Send(m.Key, "order "+m.Value)}, nil
	})
	st := b.Into(audit).MustBuild()
	err = stage.Run(ctx, stage.Config{ApplicationID: "shop", InstanceID: "shop-1", Brokers: []string{"localhost:9092"}, StateDir: "/var/lib/shop"}, st)
	if err != nil {
		log.Fatal(err)
	}
}
