// Package kafkagoclock stamps and observes segmentio/kafka-go messages with
// Parsley's causal clock (package clock), so a kafka-go producer writes the
// same stamps a franz-go producer or a Parsley stage writes.
//
// kafka-go cannot learn topic IDs: its Metadata requests stop at version 8,
// and IDs arrived in version 10. A clock from New therefore asks the
// cluster through a franz-go admin client (kadm), which needs nothing but
// the seed brokers and shares nothing with the kafka-go Writer and Reader.
//
// kafka-go's WriteMessages returns no offsets; the Writer's Completion
// callback receives them. Completion folds each acknowledged message, so
// with a synchronous Writer (the default) a WriteMessages call that
// returned nil has been folded, and the next stamp claims it. Set
// BatchSize: 1 for that send-await-fold pattern: the default batching
// waits up to BatchTimeout (1s) for more messages before sending one.
//
//	clk, admin, err := kafkagoclock.New(brokers)
//	defer admin.Close()
//	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Balancer: &kafka.Murmur2Balancer{},
//		BatchSize: 1, RequiredAcks: kafka.RequireAll}
//	w.Completion = kafkagoclock.Completion(clk, nil)
//	...
//	if err := kafkagoclock.Observe(ctx, clk, consumed); err != nil { ... }
//	msg := kafka.Message{Topic: "payments", Key: id, Value: v}
//	if err := kafkagoclock.Stamp(ctx, clk, &msg); err != nil { ... }
//	if err := w.WriteMessages(ctx, msg); err != nil { ... }
//
// This package is its own Go module, so the main Parsley module does not
// depend on kafka-go.
package kafkagoclock

import (
	"context"
	"errors"
	"fmt"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrNoTopic is wrapped when a message to stamp names no topic. A Writer
// with its Topic field set requires messages without one; stamp such
// messages with clock.AppendStamp(ctx, clk, w.Topic, msg.Headers) instead.
var ErrNoTopic = errors.New("kafkagoclock: message has no topic")

// New returns an empty clock that resolves topic names through a new
// franz-go admin client for brokers, and that client, which the caller
// closes when done with the clock. opts are those of clock.New.
func New(brokers []string, opts ...clock.Option) (*clock.Clock, *kadm.Client, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, nil, fmt.Errorf("kafkagoclock: admin client: %w", err)
	}
	admin := kadm.NewClient(cl)
	return clock.New(admin, opts...), admin, nil
}

// Stamp appends clk's stamp to msg.Headers, after the message's own
// headers. msg.Topic must be set (ErrNoTopic otherwise). A message that
// already carries a reserved header (vc, vc-sender, vc-seq, parsley.*) is
// refused with an error wrapping headers.ErrReservedHeader; an unknown
// topic is a *clock.UnknownTopicError. On error msg is unchanged.
func Stamp(ctx context.Context, clk *clock.Clock, msg *kafka.Message) error {
	if msg.Topic == "" {
		return ErrNoTopic
	}
	hs, err := clock.AppendStamp(ctx, clk, msg.Topic, msg.Headers)
	if err != nil {
		return err
	}
	msg.Headers = hs
	return nil
}

// Observe folds a consumed message into clk: its coordinate and the clock
// it carries. Its errors are those of clock.Clock.Observe.
func Observe(ctx context.Context, clk *clock.Clock, msg kafka.Message) error {
	return clock.ObserveHeaders(ctx, clk, msg.Topic, int32(msg.Partition), msg.Offset, msg.Headers)
}

// Completion returns a kafka.Writer Completion callback that folds every
// acknowledged message into clk and then calls next (which may be nil). A
// failed write folds nothing; when it failed because the broker did not
// know the topic or its ID, clk forgets the topic's cached ID, so the next
// stamp looks up the current incarnation. If folding fails, next receives
// that error.
func Completion(clk *clock.Clock, next func([]kafka.Message, error)) func([]kafka.Message, error) {
	return func(msgs []kafka.Message, err error) {
		if err == nil {
			err = fold(clk, msgs)
		} else if errors.Is(err, kafka.UnknownTopicOrPartition) || errors.Is(err, kafka.UnknownTopicID) {
			for _, m := range msgs {
				clk.Resolver().Forget(m.Topic)
			}
		}
		if next != nil {
			next(msgs, err)
		}
	}
}

func fold(clk *clock.Clock, msgs []kafka.Message) error {
	// The writer gives the callback no context. The topic was resolved
	// when the message was stamped, so the lookup is a cache hit unless
	// the answer expired meanwhile.
	ctx, cancel := context.WithTimeout(context.Background(), clock.DefaultLookupTimeout)
	defer cancel()
	for _, m := range msgs {
		if err := clk.Produced(ctx, m.Topic, int32(m.Partition), m.Offset); err != nil {
			return err
		}
	}
	return nil
}

// ReadStamp decodes a consumed message's causal metadata, for
// observability.
func ReadStamp(msg kafka.Message) (*headers.Stamp, error) {
	s := new(headers.Stamp)
	if err := headers.ReadStamp(s, msg.Headers); err != nil {
		return nil, err
	}
	return s, nil
}
