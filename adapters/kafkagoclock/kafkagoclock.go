// Package kafkagoclock stamps and observes segmentio/kafka-go messages with
// Parsley's causal clock (package clock), so a kafka-go producer writes the
// same stamps a franz-go producer or a Parsley stage writes.
//
// kafka-go cannot learn topic IDs: its Metadata requests stop at version 8,
// and IDs arrived in version 10. New therefore looks them up through a
// franz-go admin client (kadm) for the seed brokers, which shares nothing
// with the kafka-go Writer and Reader; it is opened at the first lookup and
// closed once lookups stop for clock.DefaultLookupIdle, so the clock needs
// no Close.
//
// kafka-go's WriteMessages returns no offsets; only the Writer's Completion
// callback sees them. WriteMessage stamps a message, writes it, and folds
// it in the caller's goroutine, returning its partition and offset, or the
// error of the write or of the fold. It sets the Writer's Completion to
// Completion(nil) the first time it writes through a Writer without one;
// a Writer with a callback of its own sets Completion(itsCallback).
//
//	clk, err := kafkagoclock.New(brokers)
//	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Balancer: &kafka.Murmur2Balancer{},
//		BatchSize: 1, RequiredAcks: kafka.RequireAll}
//	...
//	if err := kafkagoclock.Observe(ctx, clk, &consumed); err != nil { ... }
//	msg := kafka.Message{Topic: "payments", Key: id, Value: v}
//	partition, offset, err := kafkagoclock.WriteMessage(ctx, clk, w, &msg)
//
// kafka-go has no transactional producer. A service whose transactions run
// on another client (franz-go's, through clock.BeginTransaction) shares the
// clock with its kafka-go writes: while such a transaction holds sends,
// WriteMessage is refused with a *clock.OpenTxnError.
//
// This package is its own Go module, so the main Parsley module does not
// depend on kafka-go.
package kafkagoclock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrNoTopic is wrapped when a message to stamp names no topic, and
// neither does the Writer it is written through.
var ErrNoTopic = errors.New("kafkagoclock: message has no topic")

// ErrWriter is wrapped when WriteMessage is given a Writer it cannot fold
// the writes of: an Async one (WriteMessages returns before the
// acknowledgement), one with RequiredAcks: RequireNone (no offsets come
// back), or one whose Completion callback is not one Completion returned.
var ErrWriter = errors.New("kafkagoclock: writer cannot report what it wrote")

// New returns an empty clock that resolves topic names through a franz-go
// admin client for brokers, opened at the first lookup and closed once
// lookups stop for clock.DefaultLookupIdle (the clock's Close closes it at
// once): the clock needs no Close. opts are those of clock.New; an empty
// brokers list is an error.
func New(brokers []string, opts ...clock.Option) (*clock.Clock, error) {
	if len(brokers) == 0 {
		return nil, errors.New("kafkagoclock: no seed brokers")
	}
	brokers = append([]string(nil), brokers...)
	lookup, release := clock.IdleLookup(func(context.Context) (clock.TopicIDLookup, func() error, error) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
		if err != nil {
			return nil, nil, fmt.Errorf("kafkagoclock: admin client for %v: %w", brokers, err)
		}
		return clock.AdminLookup(kadm.NewClient(cl)), func() error { cl.Close(); return nil }, nil
	}, 0)
	return clock.New(nil, append([]clock.Option{clock.TopicIDs(lookup), clock.OnClose(release)}, opts...)...), nil
}

// Stamp appends clk's stamp to msg.Headers, after the message's own
// headers. msg.Topic must be set (ErrNoTopic otherwise). A message that
// already carries a reserved header (vc, vc-sender, vc-seq, parsley.*) is
// refused with an error wrapping headers.ErrReservedHeader; an unknown
// topic is a *clock.UnknownTopicError; a transaction's clock is refused
// (clock.ErrTxnClock: a kafka-go write is never in a transaction), and so
// is a stamp an open transaction forbids (*clock.OpenTxnError). On error
// msg is unchanged.
//
// A message stamped with Stamp and written with the Writer's own
// WriteMessages is not folded: use WriteMessage for the sends the next
// stamp must claim.
func Stamp(ctx context.Context, clk *clock.Clock, msg *kafka.Message) error {
	return stamp(ctx, clk, msg.Topic, msg)
}

func stamp(ctx context.Context, clk *clock.Clock, topic string, msg *kafka.Message) error {
	if topic == "" {
		return ErrNoTopic
	}
	if clk.Txn() != nil {
		return fmt.Errorf("kafkagoclock: stamp for %q: %w: kafka-go writes are never in a transaction; stamp through the shared clock", topic, clock.ErrTxnClock)
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

// report carries one message's result from the Writer's Completion back to
// the WriteMessage call that wrote it, through the message's WriterData.
type report struct {
	own       any // the message's own WriterData
	done      chan struct{}
	partition int32
	offset    int64
	err       error
}

// Completion returns the kafka.Writer Completion callback WriteMessage
// needs; WriteMessage sets Completion(nil) on a Writer without one, so set
// it yourself only to keep a callback of your own, next. For each message
// WriteMessage wrote it hands the write's partition, offset and error back
// to that call, which folds it; it folds nothing itself, so no error stops
// here. It then calls next (which may be nil) with every message, each
// carrying its own WriterData again.
//
// Never inlined: an inlined copy would make its callbacks' code another
// function's, and WriteMessage tells the adapter's callbacks by their code.
//
//go:noinline
func Completion(next func([]kafka.Message, error)) func([]kafka.Message, error) {
	return func(msgs []kafka.Message, err error) {
		for i := range msgs {
			r, ok := msgs[i].WriterData.(*report)
			if !ok {
				continue
			}
			msgs[i].WriterData = r.own
			r.partition, r.offset, r.err = int32(msgs[i].Partition), msgs[i].Offset, err
			close(r.done)
		}
		if next != nil {
			next(msgs, err)
		}
	}
}

// completionCode is the code of every callback Completion returns: closures
// of one function literal share it, so a Writer's Completion can be told
// to be the adapter's. It is set once, at init, and only read.
var completionCode = reflect.ValueOf(Completion(nil)).Pointer()

// completionMu serializes WriteMessage's setting of a Writer's Completion
// (one package-wide lock, since a Writer has none the adapter could use).
var completionMu sync.Mutex

// useCompletion makes w report its writes to WriteMessage: it sets
// Completion(nil) on a Writer without a Completion, and refuses one with a
// callback of its own.
func useCompletion(w *kafka.Writer) error {
	completionMu.Lock()
	defer completionMu.Unlock()
	switch {
	case w.Completion == nil:
		w.Completion = Completion(nil)
	case reflect.ValueOf(w.Completion).Pointer() != completionCode:
		return fmt.Errorf("%w: its Completion is a callback of its own; keep it with Completion: kafkagoclock.Completion(yours)", ErrWriter)
	}
	return nil
}

// WriteMessage stamps msg, writes it through w, waits for the
// acknowledgement and folds it, so the next stamp claims it: the
// sequential pattern that orders a producer's sends across topics. It
// returns the partition and offset the message was written at, and sets
// them and the stamp in msg; a failed write leaves msg as it was, so it can
// be written again. w must be synchronous (not Async) and ask for
// acknowledgements (not RequireNone); set BatchSize: 1, or each write waits
// up to BatchTimeout for others. The first WriteMessage through a Writer
// without a Completion sets it to Completion(nil), which hands each write's
// offset back here; one with a callback of its own is refused (ErrWriter)
// unless that callback is wrapped, Completion(yours). Set up a Writer before
// anything writes through it concurrently: WriteMessage may set a field.
//
// clk is a shared clock (kafka-go has no transactions, so a transaction's
// clock is refused, wrapping clock.ErrTxnClock). While a transaction
// begun on clk holds sends, the stamp is refused with a
// *clock.OpenTxnError and nothing is written.
//
// A failed write is its error and folds nothing; when the broker did not
// know the topic or its ID, clk forgets the topic's cached ID, so the next
// stamp looks up the current incarnation. A write that succeeded but cannot
// be folded returns its partition and offset with a *clock.NotFoldedError:
// the message is written; do not write it again. If ctx ends first the
// message may still be written, unfolded.
func WriteMessage(ctx context.Context, clk *clock.Clock, w *kafka.Writer, msg *kafka.Message) (partition int32, offset int64, err error) {
	switch {
	case w.Async:
		return -1, -1, fmt.Errorf("%w: Async is set", ErrWriter)
	case w.RequiredAcks == kafka.RequireNone:
		return -1, -1, fmt.Errorf("%w: RequiredAcks is RequireNone", ErrWriter)
	case clk.Txn() != nil:
		return -1, -1, fmt.Errorf("kafkagoclock: WriteMessage: %w: kafka-go writes are never in a transaction; write through the shared clock", clock.ErrTxnClock)
	}
	if err := useCompletion(w); err != nil {
		return -1, -1, err
	}
	topic := msg.Topic
	if topic == "" {
		topic = w.Topic
	}
	out := *msg
	if err := stamp(ctx, clk, topic, &out); err != nil {
		return -1, -1, err
	}
	r := &report{own: msg.WriterData, done: make(chan struct{})}
	out.WriterData = r
	if err := w.WriteMessages(ctx, out); err != nil {
		var we kafka.WriteErrors
		if errors.As(err, &we) && len(we) == 1 && we[0] != nil {
			err = we[0]
		}
		if errors.Is(err, kafka.UnknownTopicOrPartition) || errors.Is(err, kafka.UnknownTopicID) {
			clk.Resolver().Forget(topic)
		}
		return -1, -1, fmt.Errorf("kafkagoclock: write to %q: %w", topic, err)
	}
	select {
	case <-r.done:
	default:
		// Only a Completion replaced during the write gets here.
		return -1, -1, &clock.NotFoldedError{Topic: topic, Partition: -1, Offset: -1,
			Err: fmt.Errorf("%w: the write was not reported; its Completion was replaced", ErrWriter)}
	}
	msg.Headers, msg.Partition, msg.Offset = out.Headers, int(r.partition), r.offset
	if err := clk.Produced(ctx, topic, r.partition, r.offset); err != nil {
		return r.partition, r.offset, &clock.NotFoldedError{Topic: topic, Partition: r.partition, Offset: r.offset, Err: err}
	}
	return r.partition, r.offset, nil
}

// Observe folds a consumed message into clk: its coordinate and the clock
// it carries. Its errors are those of clock.Clock.Observe.
func Observe(ctx context.Context, clk *clock.Clock, msg *kafka.Message) error {
	return clock.ObserveHeaders(ctx, clk, msg.Topic, int32(msg.Partition), msg.Offset, msg.Headers)
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
