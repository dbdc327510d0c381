package kafkagoclock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/parsley-go/parsley/adapters/adaptertest"
	"github.com/parsley-go/parsley/adapters/kafkagoclock"
	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
)

// client is a kafka-go Writer and Readers with the adapter in between: no
// header conversion and no topic-ID code of its own.
type client struct {
	brokers []string
	writer  *kafka.Writer
	admin   *kadm.Client
	clk     *clock.Clock
	stamp   bool
}

func newClient(stamp bool) func(context.Context, []string) (adaptertest.Client, error) {
	return func(_ context.Context, brokers []string) (adaptertest.Client, error) {
		clk, admin, err := kafkagoclock.New(brokers)
		if err != nil {
			return nil, err
		}
		w := &kafka.Writer{
			Addr:         kafka.TCP(brokers...),
			Balancer:     &kafka.Murmur2Balancer{},
			BatchSize:    1, // send-await-fold without waiting for a batch to fill
			RequiredAcks: kafka.RequireAll,
		}
		if stamp {
			w.Completion = kafkagoclock.Completion(clk, nil)
		}
		return &client{brokers: brokers, writer: w, admin: admin, clk: clk, stamp: stamp}, nil
	}
}

func (c *client) Produce(ctx context.Context, topic string, key, value []byte) error {
	msg := kafka.Message{Topic: topic, Key: key, Value: value}
	if c.stamp {
		if err := kafkagoclock.Stamp(ctx, c.clk, &msg); err != nil {
			return err
		}
	}
	return c.writer.WriteMessages(ctx, msg) // Completion has folded it on return
}

func (c *client) Consume(ctx context.Context, topic string, n int, handle func(key, value []byte) error) error {
	parts, err := kafka.LookupPartitions(ctx, "tcp", c.brokers[0], topic)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs := make(chan kafka.Message)
	for _, p := range parts {
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: c.brokers, Topic: topic, Partition: p.ID, MaxWait: 50 * time.Millisecond})
		defer r.Close()
		go func() {
			for {
				m, err := r.ReadMessage(ctx)
				if err != nil {
					return
				}
				select {
				case msgs <- m:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	for range n {
		var m kafka.Message
		select {
		case m = <-msgs:
		case <-ctx.Done():
			return ctx.Err()
		}
		if c.stamp {
			if err := kafkagoclock.Observe(ctx, c.clk, m); err != nil {
				return err
			}
		}
		if err := handle(m.Key, m.Value); err != nil {
			return err
		}
	}
	return nil
}

func (c *client) Close() error {
	err := c.writer.Close()
	c.admin.Close()
	return err
}

func TestPipeline(t *testing.T) {
	adaptertest.Test(t, 100, newClient)
}

func lookup(ids map[string]headers.TopicID) clock.TopicIDLookup {
	return func(_ context.Context, topic string) (headers.TopicID, error) {
		if id, ok := ids[topic]; ok {
			return id, nil
		}
		return headers.TopicID{}, &clock.UnknownTopicError{Topic: topic}
	}
}

func TestCompletionFoldsOnlyAcknowledgedWrites(t *testing.T) {
	ctx := context.Background()
	clk := clock.New(nil, clock.TopicIDs(lookup(map[string]headers.TopicID{"payments": {5}})))
	var got error
	done := kafkagoclock.Completion(clk, func(_ []kafka.Message, err error) { got = err })
	ch := headers.Channel{Topic: headers.TopicID{5}, Partition: 1}

	done([]kafka.Message{{Topic: "payments", Partition: 1, Offset: 4}}, kafka.NotEnoughReplicas)
	if _, ok := clk.Snapshot().Offset(ch); ok || !errors.Is(got, kafka.NotEnoughReplicas) {
		t.Fatalf("a failed write was folded (or its error lost: %v)", got)
	}
	done([]kafka.Message{{Topic: "payments", Partition: 1, Offset: 4}, {Topic: "payments", Partition: 1, Offset: 5}}, nil)
	if o, _ := clk.Snapshot().Offset(ch); o != 5 || got != nil {
		t.Fatalf("after acknowledged writes at 4 and 5 the clock claims %d (err %v); want 5", o, got)
	}
	if _, ok := clk.Resolver().Cached("payments"); !ok {
		t.Fatal("payments not cached after a fold")
	}
	done([]kafka.Message{{Topic: "payments", Partition: 1}}, kafka.UnknownTopicOrPartition)
	if _, ok := clk.Resolver().Cached("payments"); ok {
		t.Fatal("an unknown-topic write error left the cached topic ID in place")
	}
	done([]kafka.Message{{Topic: "gone", Partition: 0, Offset: 1}}, nil)
	var ute *clock.UnknownTopicError
	if !errors.As(got, &ute) || ute.Topic != "gone" {
		t.Fatalf("folding a write to a topic that does not resolve: %v; want an *UnknownTopicError naming it", got)
	}

	msg := kafka.Message{Value: []byte("x")}
	if err := kafkagoclock.Stamp(ctx, clk, &msg); !errors.Is(err, kafkagoclock.ErrNoTopic) {
		t.Fatalf("stamp without a topic: %v; want ErrNoTopic", err)
	}
	msg = kafka.Message{Topic: "payments", Headers: []kafka.Header{{Key: "vc-seq"}}}
	if err := kafkagoclock.Stamp(ctx, clk, &msg); !errors.Is(err, headers.ErrReservedHeader) || len(msg.Headers) != 1 {
		t.Fatalf("stamp over a reserved header: %v; want ErrReservedHeader and no change", err)
	}
}
