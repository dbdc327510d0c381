package confluentclock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/parsley-go/parsley/adapters/adaptertest"
	"github.com/parsley-go/parsley/adapters/confluentclock"
	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// client is a librdkafka producer and consumer with the adapter in
// between, written from the package's docs: the client's own
// configuration, the clock, and nothing else.
type client struct {
	producer *kafka.Producer
	brokers  string
	clk      *clock.Clock
	stamp    bool
}

// kfakeConf is what every client on the embedded broker sets: kfake does
// not take librdkafka's client telemetry (KIP-714).
func kfakeConf(brokers []string) kafka.ConfigMap {
	return kafka.ConfigMap{"bootstrap.servers": strings.Join(brokers, ","), "enable.metrics.push": false}
}

func newClient(stamp bool) func(context.Context, []string) (adaptertest.Client, error) {
	return func(_ context.Context, brokers []string) (adaptertest.Client, error) {
		conf := kfakeConf(brokers)
		conf["partitioner"] = "murmur2_random" // the Java client's: co-partitioning
		conf["acks"] = "all"
		conf["linger.ms"] = 0
		p, err := kafka.NewProducer(&conf)
		if err != nil {
			return nil, err
		}
		go drainEvents(p) // logs and errors not tied to one message
		clk, err := confluentclock.New(p)
		if err != nil {
			p.Close()
			return nil, err
		}
		return &client{producer: p, brokers: strings.Join(brokers, ","), clk: clk, stamp: stamp}, nil
	}
}

// drainEvents empties the producer's event channel until Close closes it.
func drainEvents(p *kafka.Producer) {
	for range p.Events() {
	}
}

func (c *client) Produce(ctx context.Context, topic string, key, value []byte) error {
	msg := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Key: key, Value: value}
	if c.stamp {
		_, _, err := confluentclock.Produce(ctx, c.clk, c.producer, msg)
		return err
	}
	reports := make(chan kafka.Event, 1)
	if err := c.producer.Produce(msg, reports); err != nil {
		return err
	}
	select {
	case e := <-reports:
		return e.(*kafka.Message).TopicPartition.Error
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *client) Consume(ctx context.Context, topic string, n int, handle func(key, value []byte) error) error {
	cons, err := kafka.NewConsumer(&kafka.ConfigMap{
		"bootstrap.servers":   c.brokers,
		"group.id":            "adaptertest-payment-service", // required; no group is joined
		"isolation.level":     "read_uncommitted",
		"enable.auto.commit":  false,
		"enable.metrics.push": false,
	})
	if err != nil {
		return err
	}
	defer cons.Close()
	md, err := cons.GetMetadata(&topic, false, 10000)
	if err != nil {
		return err
	}
	var tps []kafka.TopicPartition
	for _, p := range md.Topics[topic].Partitions {
		tps = append(tps, kafka.TopicPartition{Topic: &topic, Partition: p.ID, Offset: kafka.OffsetBeginning})
	}
	if err := cons.Assign(tps); err != nil {
		return err
	}
	for seen := 0; seen < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		m, err := cons.ReadMessage(100 * time.Millisecond)
		if err != nil {
			var kerr kafka.Error
			if errors.As(err, &kerr) && kerr.IsTimeout() {
				continue
			}
			return err
		}
		if c.stamp {
			if err := confluentclock.Observe(ctx, c.clk, m); err != nil {
				return err
			}
		}
		if err := handle(m.Key, m.Value); err != nil {
			return err
		}
		seen++
	}
	return nil
}

func (c *client) Close() error {
	c.producer.Flush(1000)
	c.producer.Close()
	return nil
}

func TestPipeline(t *testing.T) {
	adaptertest.Test(t, 100, newClient)
}

// TestLookupRebuildsTheTopicID checks the two int64 halves of confluent's
// UUID against the ID franz-go reads off the wire.
func TestLookupRebuildsTheTopicID(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	fc, err := kgo.NewClient(kgo.SeedBrokers(fake.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer fc.Close()
	want, err := clock.AdminLookup(kadm.NewClient(fc))(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	p, err := kafka.NewProducer(&kafka.ConfigMap{"bootstrap.servers": strings.Join(fake.ListenAddrs(), ","), "enable.metrics.push": false})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	go drainEvents(p)
	admin, err := kafka.NewAdminClientFromProducer(p)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	got, err := confluentclock.Lookup(admin)(ctx, "orders")
	if err != nil || got != want {
		t.Fatalf("confluent lookup of orders = %v, %v; franz-go reads %v", got, err, want)
	}
	_, err = confluentclock.Lookup(admin)(ctx, "missing")
	var ute *clock.UnknownTopicError
	if !errors.As(err, &ute) || ute.Topic != "missing" {
		t.Fatalf("lookup of a missing topic: %v; want an *UnknownTopicError naming it", err)
	}
}

func TestDeliveredFoldsOnlyAcknowledgedSends(t *testing.T) {
	ctx := context.Background()
	clk := clock.New(nil, clock.TopicIDs(func(_ context.Context, topic string) (headers.TopicID, error) {
		return headers.TopicID{9}, nil
	}))
	topic := "payments"
	ch := headers.Channel{Topic: headers.TopicID{9}, Partition: 2}
	report := func(offset kafka.Offset, err error) *kafka.Message {
		return &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: 2, Offset: offset, Error: err}}
	}
	failed := kafka.NewError(kafka.ErrMsgTimedOut, "timed out", false)
	if err := confluentclock.Delivered(ctx, clk, report(3, failed)); err == nil {
		t.Fatal("a failed delivery report returned no error")
	}
	if _, ok := clk.Snapshot().Offset(ch); ok {
		t.Fatal("a failed delivery was folded")
	}
	if _, ok := clk.Resolver().Cached(topic); ok {
		t.Fatal("nothing resolved the topic yet, but it is cached")
	}
	if err := confluentclock.Delivered(ctx, clk, report(3, nil)); err != nil {
		t.Fatal(err)
	}
	var nf *clock.NotFoldedError
	if err := confluentclock.Delivered(ctx, clk, report(kafka.OffsetInvalid, nil)); !errors.As(err, &nf) || !errors.Is(err, clock.ErrInvalidCoordinate) || nf.Partition != 2 {
		t.Fatalf("a report without an offset (acks=0): %v; want a *clock.NotFoldedError naming payments/2", err)
	}
	if o, _ := clk.Snapshot().Offset(ch); o != 3 {
		t.Fatalf("after a delivery at 3 the clock claims %d", o)
	}
	if err := confluentclock.Delivered(ctx, clk, report(4, failed)); err == nil {
		t.Fatal("a failed delivery report returned no error")
	}
	if _, ok := clk.Resolver().Cached(topic); !ok {
		t.Fatal("a timeout dropped the cached topic ID")
	}
	unknown := kafka.NewError(kafka.ErrUnknownTopicOrPart, "unknown topic", false)
	if err := confluentclock.Delivered(ctx, clk, report(4, unknown)); err == nil {
		t.Fatal("a failed delivery report returned no error")
	}
	if _, ok := clk.Resolver().Cached(topic); ok {
		t.Fatal("an unknown-topic delivery error left the cached topic ID in place")
	}
	if err := confluentclock.Stamp(ctx, clk, &kafka.Message{}); !errors.Is(err, confluentclock.ErrNoTopic) {
		t.Fatalf("stamp without a topic: %v; want ErrNoTopic", err)
	}
}

// swallow is a Producer whose sends are never reported, or reported
// delivered at a fixed offset.
type swallow struct{ deliver bool }

func (s swallow) Produce(msg *kafka.Message, reports chan kafka.Event) error {
	if s.deliver {
		m := *msg
		m.TopicPartition.Partition, m.TopicPartition.Offset = 0, 5
		reports <- &m
	}
	return nil
}

// TestProduceWithoutAReportLeavesTheMessageUnstamped: a Produce whose
// context ends before the delivery report says the delivery is unconfirmed
// and leaves the message as it was, so producing it again does not fail on
// its own stamp.
func TestProduceWithoutAReportLeavesTheMessageUnstamped(t *testing.T) {
	clk := clock.New(nil, clock.TopicIDs(func(context.Context, string) (headers.TopicID, error) { return headers.TopicID{9}, nil }))
	topic := "payments"
	msg := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny},
		Headers: []kafka.Header{{Key: "trace", Value: []byte("1")}}}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, _, err := confluentclock.Produce(ctx, clk, swallow{}, msg)
	if !errors.Is(err, confluentclock.ErrUnconfirmed) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Produce whose report never came: %v; want ErrUnconfirmed and the context's error", err)
	}
	if len(msg.Headers) != 1 || msg.Headers[0].Key != "trace" {
		t.Fatalf("after an unconfirmed Produce the message carries %v; want its own header only", msg.Headers)
	}
	if !clk.Snapshot().IsEmpty() {
		t.Fatalf("an unconfirmed send was folded: %v", clk.Snapshot())
	}
	partition, offset, err := confluentclock.Produce(context.Background(), clk, swallow{deliver: true}, msg)
	if err != nil || partition != 0 || offset != 5 {
		t.Fatalf("producing it again: %d@%d, %v; want payments/0@5", partition, offset, err)
	}
	if len(msg.Headers) != 2 || msg.Headers[1].Key != headers.HeaderVC {
		t.Fatalf("after the retry the message carries %v; want its own header and one stamp", msg.Headers)
	}
}

// TestNewBorrowsTheClient: New looks topics up through the client it is
// given — a Producer, or a Consumer with its consumer-only settings —
// and refuses no client, a closed one, or another kind.
func TestNewBorrowsTheClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	conf := kfakeConf(fake.ListenAddrs())
	conf["group.id"] = "payment-service"
	conf["auto.offset.reset"] = "earliest"
	c, err := kafka.NewConsumer(&conf)
	if err != nil {
		t.Fatal(err)
	}
	clk, err := confluentclock.New(c)
	if err != nil {
		t.Fatal(err)
	}
	topic := "orders"
	if err := confluentclock.Stamp(ctx, clk, &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic}}); err != nil {
		t.Fatalf("a stamp through a consumer's clock: %v", err)
	}
	if _, ok := clk.Resolver().Cached("orders"); !ok {
		t.Fatal("the stamp resolved nothing")
	}
	c.Close()
	for name, client := range map[string]kafka.Handle{"closed": c, "nil": (*kafka.Producer)(nil), "none": nil} {
		if _, err := confluentclock.New(client); !errors.Is(err, confluentclock.ErrNoClient) {
			t.Errorf("New with a %s client: %v; want ErrNoClient", name, err)
		}
	}
}
