package stage

import (
	"time"

	"github.com/parsley-go/parsley/headers"
)

// Header is a record header.
type Header = headers.Header

// Topic is a typed Kafka topic: a name and the codecs of its keys and
// values. Declare each topic once and use the same value as one stage's
// sink and another's source, so codec agreement across a hop holds by
// construction.
type Topic[K, V any] struct {
	name  string
	key   Codec[K]
	value Codec[V]
	sink  *sinkCodecs
}

// sinkCodecs is the type-erased encoding side of a topic, shared by every
// emission the topic mints (emissions compare equal with reflect.DeepEqual
// when they carry equal keys and values to the same topic).
type sinkCodecs struct {
	name   string
	encKey func(any) ([]byte, error)
	encVal func(any) ([]byte, error)
}

// NewTopic declares a topic.
func NewTopic[K, V any](name string, key Codec[K], value Codec[V]) *Topic[K, V] {
	t := &Topic[K, V]{name: name, key: key, value: value}
	t.sink = &sinkCodecs{
		name:   name,
		encKey: func(v any) ([]byte, error) { return key.Encode(v.(K)) },
		encVal: func(v any) ([]byte, error) { return value.Encode(v.(V)) },
	}
	return t
}

// Name returns the topic's name.
func (t *Topic[K, V]) Name() string { return t.name }

// KeyCodec returns the key codec.
func (t *Topic[K, V]) KeyCodec() Codec[K] { return t.key }

// ValueCodec returns the value codec.
func (t *Topic[K, V]) ValueCodec() Codec[V] { return t.value }

func (t *Topic[K, V]) topicName() string   { return t.name }
func (t *Topic[K, V]) codecs() *sinkCodecs { return t.sink }

// Send returns an emission of (k, v) to t. Its timestamp is the handled
// message's unless overridden with At.
func (t *Topic[K, V]) Send(k K, v V) Emission {
	return Emission{sink: t.sink, key: k, value: v}
}

// SendAt is Send with an explicit timestamp.
func (t *Topic[K, V]) SendAt(k K, v V, ts time.Time) Emission {
	return t.Send(k, v).At(ts)
}

// Tombstone returns an emission of k with a nil value.
func (t *Topic[K, V]) Tombstone(k K) Emission {
	return Emission{sink: t.sink, key: k, nilValue: true}
}

// SendUnkeyed returns an emission of v with a nil key. A nil-keyed emission
// goes to partition (task partition mod the sink's partition count), so a
// replay sends it where the first attempt did.
func (t *Topic[K, V]) SendUnkeyed(v V) Emission {
	return Emission{sink: t.sink, value: v, nilKey: true}
}

// Sink is a topic a stage may send to: any *Topic[K, V].
type Sink interface {
	topicName() string
	codecs() *sinkCodecs
}

// Emission is one record a handler or fold asks the runtime to send. It is
// a value: minted by the sink topic (Topic.Send), comparable in tests with
// reflect.DeepEqual, and encoded, partitioned, stamped and produced by the
// runtime inside the step's transaction.
type Emission struct {
	sink             *sinkCodecs
	key, value       any
	nilKey, nilValue bool
	ts               time.Time
	hasTS            bool
	headers          []Header
}

// Topic returns the name of the emission's topic ("" for the zero Emission).
func (e Emission) Topic() string {
	if e.sink == nil {
		return ""
	}
	return e.sink.name
}

// Key returns the emission's key and whether it is non-nil.
func (e Emission) Key() (any, bool) { return e.key, !e.nilKey }

// Value returns the emission's value and whether it is non-nil.
func (e Emission) Value() (any, bool) { return e.value, !e.nilValue }

// At returns e with its timestamp set to ts.
func (e Emission) At(ts time.Time) Emission {
	e.ts, e.hasTS = ts, true
	return e
}

// WithHeaders returns e with hs appended to its headers. Names reserved for
// causal metadata (vc, vc-sender, vc-seq, parsley.*) are refused when the
// emission is sent, failing the step.
func (e Emission) WithHeaders(hs ...Header) Emission {
	e.headers = append(append([]Header(nil), e.headers...), hs...)
	return e
}

// Message is one causally delivered record, decoded. It carries its own
// coordinate: for a record released from the hold queue, the record's, not
// that of the record whose arrival released it.
type Message[K, V any] struct {
	Topic     string
	Partition int32
	Offset    int64
	// Coordinate names the record by topic ID, as causal clocks do.
	Coordinate headers.Coordinate
	Timestamp  time.Time
	// Headers are every header as fetched, the stamp headers included.
	Headers []Header

	Key   K
	Value V
	// KeyIsNil and ValueIsNil say the key or value was absent on the wire
	// (Key or Value is then the zero value; codecs never saw it).
	KeyIsNil, ValueIsNil bool
}
