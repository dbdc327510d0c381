// Package confluentclock stamps and observes confluent-kafka-go (v2)
// messages with Parsley's causal clock (package clock), so a librdkafka
// producer writes the same stamps a franz-go producer or a Parsley stage
// writes.
//
// A clock from New resolves topic names to topic IDs through the
// AdminClient's DescribeTopics. Stamp and Observe take confluent's header
// type as it is; Delivered folds a delivery report, and Produce is the
// send-await-fold pattern in one call.
//
//	admin, _ := kafka.NewAdminClientFromProducer(p)
//	clk := confluentclock.New(admin)
//	// producer config: "partitioner": "murmur2_random" (co-partitioning)
//	...
//	if err := confluentclock.Observe(ctx, clk, consumed); err != nil { ... }
//	msg := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Key: id, Value: v}
//	if err := confluentclock.Produce(ctx, clk, p, msg); err != nil { ... }
//
// This package is its own Go module and needs cgo (confluent-kafka-go
// links its bundled librdkafka); the main Parsley module needs neither.
package confluentclock

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
)

// ErrNoTopic is wrapped when a message names no topic.
var ErrNoTopic = errors.New("confluentclock: message has no topic")

// TopicDescriber is the part of *kafka.AdminClient that Lookup uses.
type TopicDescriber interface {
	DescribeTopics(ctx context.Context, topics kafka.TopicCollection, options ...kafka.DescribeTopicsAdminOption) (kafka.DescribeTopicsResult, error)
}

// Lookup returns a clock.TopicIDLookup that asks the cluster through
// admin's DescribeTopics.
func Lookup(admin TopicDescriber) clock.TopicIDLookup {
	return func(ctx context.Context, topic string) (headers.TopicID, error) {
		res, err := admin.DescribeTopics(ctx, kafka.NewTopicCollectionOfTopicNames([]string{topic}))
		if err != nil {
			return headers.TopicID{}, err
		}
		for _, td := range res.TopicDescriptions {
			if td.Name != topic {
				continue
			}
			if code := td.Error.Code(); code != kafka.ErrNoError {
				if unknownTopic(code) {
					return headers.TopicID{}, &clock.UnknownTopicError{Topic: topic, Broker: td.Error}
				}
				return headers.TopicID{}, td.Error
			}
			return topicID(td.TopicID), nil
		}
		return headers.TopicID{}, &clock.UnknownTopicError{Topic: topic}
	}
}

// topicID rebuilds the 16 bytes of a topic ID from the two halves
// confluent's UUID exposes, most significant first, as on the wire.
func topicID(u kafka.UUID) headers.TopicID {
	var id headers.TopicID
	binary.BigEndian.PutUint64(id[:8], uint64(u.GetMostSignificantBits()))
	binary.BigEndian.PutUint64(id[8:], uint64(u.GetLeastSignificantBits()))
	return id
}

func unknownTopic(code kafka.ErrorCode) bool {
	return code == kafka.ErrUnknownTopicOrPart || code == kafka.ErrUnknownTopic || code == kafka.ErrUnknownTopicID
}

// New returns an empty clock that resolves topic names through admin.
// opts are those of clock.New; the caller keeps ownership of admin.
func New(admin TopicDescriber, opts ...clock.Option) *clock.Clock {
	return clock.New(nil, append([]clock.Option{clock.TopicIDs(Lookup(admin))}, opts...)...)
}

// Stamp appends clk's stamp to msg.Headers, after the message's own
// headers. msg.TopicPartition.Topic must be set (ErrNoTopic otherwise). A
// message that already carries a reserved header (vc, vc-sender, vc-seq,
// parsley.*) is refused with an error wrapping headers.ErrReservedHeader;
// an unknown topic is a *clock.UnknownTopicError. On error msg is
// unchanged.
func Stamp(ctx context.Context, clk *clock.Clock, msg *kafka.Message) error {
	topic, err := topicOf(msg)
	if err != nil {
		return err
	}
	hs, err := clock.AppendStamp(ctx, clk, topic, msg.Headers)
	if err != nil {
		return err
	}
	msg.Headers = hs
	return nil
}

// Observe folds a consumed message into clk: its coordinate and the clock
// it carries. Its errors are those of clock.Clock.Observe.
func Observe(ctx context.Context, clk *clock.Clock, msg *kafka.Message) error {
	topic, err := topicOf(msg)
	if err != nil {
		return err
	}
	tp := msg.TopicPartition
	return clock.ObserveHeaders(ctx, clk, topic, tp.Partition, int64(tp.Offset), msg.Headers)
}

// Delivered takes a delivery report, a *kafka.Message from the delivery
// channel or the Producer's Events: an acknowledged message is folded into
// clk, so the next stamp claims it; a failed one folds nothing and is
// returned as its error, and when the broker did not know the topic clk
// forgets the topic's cached ID, so the next stamp looks up its current
// incarnation.
func Delivered(ctx context.Context, clk *clock.Clock, report *kafka.Message) error {
	topic, err := topicOf(report)
	if err != nil {
		return err
	}
	tp := report.TopicPartition
	if tp.Error != nil {
		var kerr kafka.Error
		if errors.As(tp.Error, &kerr) && unknownTopic(kerr.Code()) {
			clk.Resolver().Forget(topic)
		}
		return fmt.Errorf("confluentclock: deliver to %q: %w", topic, tp.Error)
	}
	return clk.Produced(ctx, topic, tp.Partition, int64(tp.Offset))
}

// Producer is the part of *kafka.Producer that Produce uses.
type Producer interface {
	Produce(msg *kafka.Message, deliveryChan chan kafka.Event) error
}

// Produce stamps msg, sends it through p, waits for its delivery report and
// folds it, so the next stamp claims it: the sequential pattern that
// orders a producer's sends across topics. If ctx ends first the message
// may still be delivered, unfolded: a later stamp then does not claim it.
func Produce(ctx context.Context, clk *clock.Clock, p Producer, msg *kafka.Message) error {
	if err := Stamp(ctx, clk, msg); err != nil {
		return err
	}
	reports := make(chan kafka.Event, 1) // librdkafka never blocks on it
	if err := p.Produce(msg, reports); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e := <-reports:
			if m, ok := e.(*kafka.Message); ok {
				return Delivered(ctx, clk, m)
			}
		}
	}
}

// ReadStamp decodes a consumed message's causal metadata, for
// observability.
func ReadStamp(msg *kafka.Message) (*headers.Stamp, error) {
	s := new(headers.Stamp)
	if err := headers.ReadStamp(s, msg.Headers); err != nil {
		return nil, err
	}
	return s, nil
}

func topicOf(msg *kafka.Message) (string, error) {
	if msg.TopicPartition.Topic == nil || *msg.TopicPartition.Topic == "" {
		return "", ErrNoTopic
	}
	return *msg.TopicPartition.Topic, nil
}
