// Package confluentclock stamps and observes confluent-kafka-go (v2)
// messages with Parsley's causal clock (package clock), so a librdkafka
// producer writes the same stamps a franz-go producer or a Parsley stage
// writes.
//
// New takes the client the program already has — its Producer (or
// Consumer) — and looks topic IDs up through it (an AdminClient derived
// from the client, which holds nothing of its own): the clock needs no
// Close. Stamp and Observe take confluent's header type as it is. Produce
// is the send-await-fold pattern in one call: it returns the partition and
// offset and writes the delivery report into the message, and fails when
// the delivery or the fold fails. Delivered folds a delivery report of a
// pipelined send.
//
//	conf := &kafka.ConfigMap{"bootstrap.servers": brokers, "partitioner": "murmur2_random", "acks": "all"}
//	p, err := kafka.NewProducer(conf)
//	clk, err := confluentclock.New(p)
//	...
//	if err := confluentclock.Observe(ctx, clk, consumed); err != nil { ... }
//	msg := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Key: id, Value: v}
//	partition, offset, err := confluentclock.Produce(ctx, clk, p, msg)
//
// A transactional producer sends through BeginTransaction's Txn, so that an
// aborted transaction is never claimed; while a Txn holds sends, plain
// sends through the same clock are refused (*clock.OpenTxnError) until it
// commits or aborts.
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

// ErrNoClient is wrapped when New is given no client, or a closed one.
var ErrNoClient = errors.New("confluentclock: no open Producer, Consumer or AdminClient")

// New returns an empty clock that resolves topic names through client: a
// *kafka.Producer or *kafka.Consumer (through an AdminClient derived from
// it, which opens nothing of its own), or an *kafka.AdminClient. The clock
// borrows client and needs no Close; once client is closed, lookups fail.
// opts are those of clock.New.
func New(client kafka.Handle, opts ...clock.Option) (*clock.Clock, error) {
	var admin *kafka.AdminClient
	var err error
	switch c := client.(type) {
	case *kafka.Producer:
		if c == nil || c.IsClosed() {
			return nil, ErrNoClient
		}
		admin, err = kafka.NewAdminClientFromProducer(c)
	case *kafka.Consumer:
		if c == nil || c.IsClosed() {
			return nil, ErrNoClient
		}
		admin, err = kafka.NewAdminClientFromConsumer(c)
	case *kafka.AdminClient:
		if c == nil || c.IsClosed() {
			return nil, ErrNoClient
		}
		admin = c
	default:
		return nil, fmt.Errorf("%w: got %T", ErrNoClient, client)
	}
	if err != nil {
		return nil, fmt.Errorf("confluentclock: admin client from %T: %w", client, err)
	}
	return clock.New(nil, append([]clock.Option{clock.TopicIDs(Lookup(admin))}, opts...)...), nil
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
	// Clipped, so the stamp never lands in spare capacity another message
	// shares.
	hs, err := clock.AppendStamp(ctx, clk, topic, msg.Headers[:len(msg.Headers):len(msg.Headers)])
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
// clk, so the next stamp claims it, and if that fails the error is a
// *clock.NotFoldedError naming the message's coordinate. A failed one folds
// nothing and is returned as its error, and when the broker did not know
// the topic clk forgets the topic's cached ID, so the next stamp looks up
// its current incarnation.
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
	if err := clk.Produced(ctx, topic, tp.Partition, int64(tp.Offset)); err != nil {
		return &clock.NotFoldedError{Topic: topic, Partition: tp.Partition, Offset: int64(tp.Offset), Err: err}
	}
	return nil
}

// Producer is the part of *kafka.Producer that Produce uses.
type Producer interface {
	Produce(msg *kafka.Message, deliveryChan chan kafka.Event) error
}

// ErrUnconfirmed is wrapped, with the context's error, when Produce's
// context ends before the delivery report: the message may still be
// delivered, and is not folded.
var ErrUnconfirmed = errors.New("confluentclock: delivery not confirmed")

// Produce stamps msg, sends it through p, waits for its delivery report and
// folds it, so the next stamp claims it: the sequential pattern that
// orders a producer's sends across topics. It returns the partition and
// offset of the delivery and writes the report into msg (TopicPartition,
// Timestamp), as librdkafka writes it into the report.
//
// clk is the shared clock: a send within a transaction goes through the
// Txn's Produce, and a transaction's clock is refused here (an error
// wrapping clock.ErrTxnClock). While a Txn on clk holds sends, the stamp is
// refused with a *clock.OpenTxnError and nothing is sent: produce the
// message after the transaction commits (it then claims the transaction's
// sends), or within it.
//
// A failed delivery is its error (also in msg.TopicPartition.Error), folds
// nothing and leaves msg unstamped, so it can be produced again. A
// delivered message that cannot be folded returns its partition and
// offset with a *clock.NotFoldedError: the message is written; do not send
// it again. If ctx ends before the delivery report, the error wraps
// ErrUnconfirmed and the context's error, and msg is left unstamped too:
// the message may still be delivered, unfolded, and producing it again
// may write it twice.
func Produce(ctx context.Context, clk *clock.Clock, p Producer, msg *kafka.Message) (partition int32, offset int64, err error) {
	if clk.Txn() != nil {
		topic, _ := topicOf(msg)
		return -1, -1, fmt.Errorf("confluentclock: Produce to %q: %w: produce within the transaction with Txn.Produce", topic, clock.ErrTxnClock)
	}
	return produce(ctx, clk, p, msg)
}

func produce(ctx context.Context, clk *clock.Clock, p Producer, msg *kafka.Message) (partition int32, offset int64, err error) {
	own := msg.Headers
	if err := Stamp(ctx, clk, msg); err != nil {
		return -1, -1, err
	}
	reports := make(chan kafka.Event, 1) // librdkafka never blocks on it
	if err := p.Produce(msg, reports); err != nil {
		msg.Headers = own
		return -1, -1, fmt.Errorf("confluentclock: produce to %q: %w", *msg.TopicPartition.Topic, err)
	}
	for {
		select {
		case <-ctx.Done():
			msg.Headers = own // as a failed send leaves it
			return -1, -1, fmt.Errorf("confluentclock: produce to %q: %w: %w", *msg.TopicPartition.Topic, ErrUnconfirmed, ctx.Err())
		case e := <-reports:
			m, ok := e.(*kafka.Message)
			if !ok {
				continue
			}
			msg.TopicPartition, msg.Timestamp, msg.TimestampType = m.TopicPartition, m.Timestamp, m.TimestampType
			if err := Delivered(ctx, clk, m); err != nil {
				if m.TopicPartition.Error != nil {
					msg.Headers = own
					return -1, -1, err
				}
				return m.TopicPartition.Partition, int64(m.TopicPartition.Offset), err
			}
			return m.TopicPartition.Partition, int64(m.TopicPartition.Offset), nil
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
