package kafkagoclock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/parsley-go/parsley/adapters/adaptertest"
	"github.com/parsley-go/parsley/adapters/kafkagoclock"
	"github.com/parsley-go/parsley/clock"
	"github.com/segmentio/kafka-go"
)

// client is a kafka-go Writer and Readers with the adapter in between,
// written from the package's docs: the client's own configuration, the
// clock, and nothing else.
type client struct {
	brokers []string
	writer  *kafka.Writer
	clk     *clock.Clock
	stamp   bool
}

func newClient(stamp bool) func(context.Context, []string) (adaptertest.Client, error) {
	return func(_ context.Context, brokers []string) (adaptertest.Client, error) {
		clk, err := kafkagoclock.New(brokers)
		if err != nil {
			return nil, err
		}
		w := &kafka.Writer{
			Addr:         kafka.TCP(brokers...),
			Balancer:     &kafka.Murmur2Balancer{},
			BatchSize:    1, // send-await-fold without waiting for a batch to fill
			RequiredAcks: kafka.RequireAll,
		}
		return &client{brokers: brokers, writer: w, clk: clk, stamp: stamp}, nil
	}
}

func (c *client) Produce(ctx context.Context, topic string, key, value []byte) error {
	msg := kafka.Message{Topic: topic, Key: key, Value: value}
	if !c.stamp {
		return c.writer.WriteMessages(ctx, msg)
	}
	_, _, err := kafkagoclock.WriteMessage(ctx, c.clk, c.writer, &msg)
	return err
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
			if err := kafkagoclock.Observe(ctx, c.clk, &m); err != nil {
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
	return errors.Join(c.writer.Close(), c.clk.Close())
}

func TestPipeline(t *testing.T) {
	adaptertest.Test(t, 100, newClient)
}
