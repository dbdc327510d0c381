// Package saramaclock stamps and observes IBM/sarama records with Parsley's
// causal clock (package clock), so a sarama producer writes the same stamps
// a franz-go producer or a Parsley stage writes.
//
// New takes the brokers and the sarama.Config the producer uses. It looks
// topic IDs up through a ClusterAdmin of its own (DescribeTopics returns
// the ID from Kafka 2.8 on, sarama's default protocol version), which it
// opens at the first lookup and closes once lookups stop for
// clock.DefaultLookupIdle: nothing needs closing. Stamp, Observe and
// Produced convert nothing: sarama's header types, whose keys are []byte,
// are read as key/value pairs.
//
//	cfg := sarama.NewConfig()
//	cfg.Producer.Return.Successes = true                    // SendMessage reports offsets
//	cfg.Producer.RequiredAcks = sarama.WaitForAll           // fold only durable sends
//	cfg.Producer.Partitioner = sarama.NewMurmur2Partitioner // co-partitioning
//	clk, err := saramaclock.New(brokers, cfg)
//	...
//	if err := saramaclock.Observe(ctx, clk, consumed); err != nil { ... }
//	msg := &sarama.ProducerMessage{Topic: "payments", Key: sarama.StringEncoder(id), Value: v}
//	partition, offset, err := saramaclock.SendMessage(ctx, clk, producer, msg)
//
// SendMessage fails when the send fails and when the acknowledged send
// cannot be folded (a *clock.NotFoldedError: the message is written, later
// stamps do not claim it). A transactional producer sends through BeginTxn's
// Txn, so that an aborted transaction is never claimed; while a Txn holds
// sends, plain sends through the same clock are refused
// (*clock.OpenTxnError) until it commits or aborts.
//
// This package is its own Go module, so the main Parsley module does not
// depend on sarama.
package saramaclock

import (
	"context"
	"errors"
	"fmt"
	"iter"

	"github.com/IBM/sarama"
	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
)

// TopicDescriber is the part of sarama.ClusterAdmin that Lookup uses.
type TopicDescriber interface {
	DescribeTopics(topics []string) ([]*sarama.TopicMetadata, error)
}

// Lookup returns a clock.TopicIDLookup that asks the cluster through
// admin's DescribeTopics. The admin client's sarama.Config.Version must be
// at least sarama.V2_8_0_0 (the default), or the cluster returns no topic
// IDs and every lookup fails with clock.ErrNoTopicID.
func Lookup(admin TopicDescriber) clock.TopicIDLookup {
	return func(_ context.Context, topic string) (headers.TopicID, error) {
		// sarama's admin API takes no context; its own timeouts bound it.
		mds, err := admin.DescribeTopics([]string{topic})
		if err != nil {
			return headers.TopicID{}, err
		}
		for _, md := range mds {
			if md == nil || md.Name != topic {
				continue
			}
			switch {
			case errors.Is(md.Err, sarama.ErrUnknownTopicOrPartition):
				return headers.TopicID{}, &clock.UnknownTopicError{Topic: topic, Broker: md.Err}
			case md.Err != sarama.ErrNoError:
				return headers.TopicID{}, md.Err
			case md.Uuid == sarama.Uuid{}:
				return headers.TopicID{}, fmt.Errorf("%w (is sarama.Config.Version below V2_8_0_0?)", clock.ErrNoTopicID)
			}
			return headers.TopicID(md.Uuid), nil
		}
		return headers.TopicID{}, &clock.UnknownTopicError{Topic: topic}
	}
}

// ErrConfig is wrapped by a *ConfigError: New was given a sarama.Config
// with which sends cannot be folded.
var ErrConfig = errors.New("saramaclock: config cannot fold sends")

// ConfigError names the setting of a sarama.Config that New refuses, and
// why.
type ConfigError struct {
	Setting string // as written in Go, e.g. "Producer.RequiredAcks = NoResponse"
	Reason  string
}

func (e *ConfigError) Error() string {
	return "saramaclock: sarama.Config " + e.Setting + ": " + e.Reason
}

// Unwrap returns ErrConfig.
func (e *ConfigError) Unwrap() error { return ErrConfig }

// ErrNoOffset is wrapped, in a *clock.NotFoldedError, when sarama reported
// a send as successful without its offset: the producer's config asks for
// no acknowledgement (Producer.RequiredAcks = NoResponse).
var ErrNoOffset = errors.New("saramaclock: send reported without an offset (RequiredAcks is NoResponse?)")

// New returns an empty clock that resolves topic names through a
// ClusterAdmin made from brokers and cfg (nil means sarama.NewConfig()),
// typically the producer's own, so TLS and SASL settings carry over. The
// admin client is opened at the first lookup and closed once lookups stop
// for clock.DefaultLookupIdle (the clock's Close closes it at once): the
// clock needs no Close. cfg is copied. opts are those of clock.New.
//
// New refuses, with a *ConfigError, a cfg that cannot fold sends: one with
// Producer.RequiredAcks = NoResponse (sarama then reports every send at
// offset 0, and a fold would claim a record the send is not), or a Version
// below sarama.V2_8_0_0 (no topic IDs), or one that does not validate.
//
// To look topics up through an admin client of your own instead, use
// clock.New(nil, clock.TopicIDs(saramaclock.Lookup(admin))).
func New(brokers []string, cfg *sarama.Config, opts ...clock.Option) (*clock.Clock, error) {
	if cfg == nil {
		cfg = sarama.NewConfig()
	}
	c := *cfg
	if err := check(&c); err != nil {
		return nil, err
	}
	brokers = append([]string(nil), brokers...)
	lookup, release := clock.IdleLookup(func(context.Context) (clock.TopicIDLookup, func() error, error) {
		admin, err := sarama.NewClusterAdmin(brokers, &c)
		if err != nil {
			return nil, nil, fmt.Errorf("saramaclock: admin client for %v: %w", brokers, err)
		}
		return Lookup(admin), admin.Close, nil
	}, 0)
	return clock.New(nil, append([]clock.Option{clock.TopicIDs(lookup), clock.OnClose(release)}, opts...)...), nil
}

func check(cfg *sarama.Config) error {
	switch {
	case cfg.Producer.RequiredAcks == sarama.NoResponse:
		return &ConfigError{Setting: "Producer.RequiredAcks = NoResponse",
			Reason: "no acknowledgement, so no offset comes back and no send can be folded; use WaitForAll"}
	case !cfg.Version.IsAtLeast(sarama.V2_8_0_0):
		return &ConfigError{Setting: "Version = " + cfg.Version.String(),
			Reason: "topic IDs, which name a clock's channels, need V2_8_0_0 or later"}
	}
	if err := cfg.Validate(); err != nil {
		return &ConfigError{Setting: "Validate()", Reason: err.Error()}
	}
	return nil
}

// Stamp appends clk's stamp to msg.Headers, after the message's own
// headers, and sets msg.Offset to -1 until sarama reports the offset, so
// that Produced refuses a success reported without one. msg.Topic must be
// set. A message that already carries a reserved header (vc, vc-sender,
// vc-seq, parsley.*) is refused with an error wrapping
// headers.ErrReservedHeader; an unknown topic is a
// *clock.UnknownTopicError; a stamp a transaction open on the clock forbids
// is a *clock.OpenTxnError. On error msg is unchanged.
func Stamp(ctx context.Context, clk *clock.Clock, msg *sarama.ProducerMessage) error {
	key, value, err := clk.StampHeader(ctx, msg.Topic, pairs(msg.Headers))
	if err != nil {
		return err
	}
	// Clipped, so the stamp never lands in spare capacity another message
	// shares.
	msg.Headers = append(msg.Headers[:len(msg.Headers):len(msg.Headers)], sarama.RecordHeader{Key: []byte(key), Value: value})
	msg.Offset = -1
	return nil
}

// Observe folds a consumed message into clk: its coordinate and the clock
// it carries. Its errors are those of clock.Clock.Observe.
func Observe(ctx context.Context, clk *clock.Clock, msg *sarama.ConsumerMessage) error {
	return clk.ObserveSeq(ctx, msg.Topic, msg.Partition, msg.Offset, pointerPairs(msg.Headers))
}

// Produced folds an acknowledged send: a message read from an
// AsyncProducer's Successes channel (Config.Producer.Return.Successes must
// be set), whose Partition and Offset the producer filled in. Never call it
// for a failed send. If the fold fails the error is a *clock.NotFoldedError;
// one for a message stamped with Stamp and reported without an offset
// (RequiredAcks is NoResponse) wraps ErrNoOffset.
func Produced(ctx context.Context, clk *clock.Clock, msg *sarama.ProducerMessage) error {
	if msg.Offset < 0 {
		return &clock.NotFoldedError{Topic: msg.Topic, Partition: msg.Partition, Offset: msg.Offset, Err: ErrNoOffset}
	}
	if err := clk.Produced(ctx, msg.Topic, msg.Partition, msg.Offset); err != nil {
		return &clock.NotFoldedError{Topic: msg.Topic, Partition: msg.Partition, Offset: msg.Offset, Err: err}
	}
	return nil
}

// Failed takes note of a failed send, from SendMessage or an AsyncProducer's
// Errors channel: when the broker did not know the topic, clk forgets the
// topic's cached ID, so the next stamp looks up the topic's current
// incarnation. Nothing is folded.
func Failed(clk *clock.Clock, topic string, err error) {
	if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		clk.Resolver().Forget(topic)
	}
}

// SendMessage stamps msg, sends it through p and waits for the
// acknowledgement, then folds it, so the next stamp claims it: the
// sequential pattern that orders a producer's sends across topics. p's
// config must set Producer.Return.Successes, as every SyncProducer's does.
//
// clk is the shared clock: a send within a transaction goes through the
// Txn's SendMessage, and a transaction's clock is refused here (an error
// wrapping clock.ErrTxnClock). While a Txn on clk holds sends, the stamp is
// refused with a *clock.OpenTxnError and nothing is sent: send the message
// after the transaction commits (it then claims the transaction's sends),
// or within it.
//
// A failed send is its error, folds nothing and leaves msg unstamped, so
// it can be sent again. An acknowledged send that cannot be folded returns
// its partition and offset with a *clock.NotFoldedError: the message is
// written; do not send it again. A send sarama reports without an offset
// (p's config has RequiredAcks = NoResponse) is such an error, wrapping
// ErrNoOffset.
func SendMessage(ctx context.Context, clk *clock.Clock, p sarama.SyncProducer, msg *sarama.ProducerMessage) (partition int32, offset int64, err error) {
	if clk.Txn() != nil {
		return -1, -1, fmt.Errorf("saramaclock: SendMessage to %q: %w: send within the transaction with Txn.SendMessage", msg.Topic, clock.ErrTxnClock)
	}
	return send(ctx, clk, p, msg)
}

func send(ctx context.Context, clk *clock.Clock, p sarama.SyncProducer, msg *sarama.ProducerMessage) (partition int32, offset int64, err error) {
	own, ownOffset := msg.Headers, msg.Offset
	if err := Stamp(ctx, clk, msg); err != nil {
		return -1, -1, err
	}
	partition, offset, err = p.SendMessage(msg)
	if err != nil {
		Failed(clk, msg.Topic, err)
		msg.Headers, msg.Offset = own, ownOffset // unstamped, so it can be sent again
		return partition, offset, err
	}
	return partition, offset, Produced(ctx, clk, msg)
}

// ReadStamp decodes a consumed message's causal metadata, for
// observability; see clock.ReadStampSeq.
func ReadStamp(msg *sarama.ConsumerMessage) (*headers.Stamp, error) {
	return clock.ReadStampSeq(pointerPairs(msg.Headers))
}

func pairs(hs []sarama.RecordHeader) iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		for _, h := range hs {
			if !yield(string(h.Key), h.Value) {
				return
			}
		}
	}
}

// pointerPairs reads the consume side's []*RecordHeader; a nil entry has
// neither key nor value.
func pointerPairs(hs []*sarama.RecordHeader) iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		for _, h := range hs {
			var k string
			var v []byte
			if h != nil {
				k, v = string(h.Key), h.Value
			}
			if !yield(k, v) {
				return
			}
		}
	}
}
