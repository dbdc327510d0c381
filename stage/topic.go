package stage

// Typed topics and what user logic sees of records: Topic, Message,
// Emission.

import (
	"context"
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
}

// NewTopic declares a topic.
func NewTopic[K, V any](name string, key Codec[K], value Codec[V]) *Topic[K, V] {
	return &Topic[K, V]{name: name, key: key, value: value}
}

// Name returns the topic's name.
func (t *Topic[K, V]) Name() string { return t.name }

// KeyCodec returns the key codec.
func (t *Topic[K, V]) KeyCodec() Codec[K] { return t.key }

// ValueCodec returns the value codec.
func (t *Topic[K, V]) ValueCodec() Codec[V] { return t.value }

func (t *Topic[K, V]) topicName() string { return t.name }

// Send returns an emission of (k, v) to t. Its timestamp is the handled
// message's unless overridden with At.
func (t *Topic[K, V]) Send(k K, v V) Emission {
	return Emission{data: &record[K, V]{t: t, k: k, v: v}}
}

// SendAt is Send with an explicit timestamp.
func (t *Topic[K, V]) SendAt(k K, v V, ts time.Time) Emission {
	return t.Send(k, v).At(ts)
}

// Tombstone returns an emission of k with a nil value.
func (t *Topic[K, V]) Tombstone(k K) Emission {
	return Emission{data: &record[K, V]{t: t, k: k, nilValue: true}}
}

// SendUnkeyed returns an emission of v with a nil key. A nil-keyed emission
// goes to partition (task partition mod the sink's partition count), so a
// replay sends it where the first attempt did.
func (t *Topic[K, V]) SendUnkeyed(v V) Emission {
	return Emission{data: &record[K, V]{t: t, v: v, nilKey: true}}
}

// Sink is a topic a stage may send to: any *Topic[K, V].
type Sink interface {
	topicName() string
}

// payload is an emission's typed content, encoded at the stamping site.
type payload interface {
	topicName() string
	key() (any, bool)
	value() (any, bool)
	encode() (k, v []byte, err error)
}

// record is the payload of an emission to a Topic[K, V]: one allocation
// per emission, compared by reflect.DeepEqual through the topic pointer
// and the values.
type record[K, V any] struct {
	t                *Topic[K, V]
	k                K
	v                V
	nilKey, nilValue bool
}

func (r *record[K, V]) topicName() string { return r.t.name }
func (r *record[K, V]) key() (any, bool) {
	if r.nilKey {
		return nil, false
	}
	return r.k, true
}

func (r *record[K, V]) value() (any, bool) {
	if r.nilValue {
		return nil, false
	}
	return r.v, true
}

// encode encodes the non-nil parts. A codec returning nil for a present
// part yields an empty, not a nil, slice: nil means absent on the wire.
func (r *record[K, V]) encode() (k, v []byte, err error) {
	if !r.nilKey {
		if k, err = r.t.key.Encode(r.k); err != nil {
			return nil, nil, &CodecError{Topic: r.t.name, Part: "key", Op: "encode", Err: err}
		}
		if k == nil {
			k = []byte{}
		}
	}
	if !r.nilValue {
		if v, err = r.t.value.Encode(r.v); err != nil {
			return nil, nil, &CodecError{Topic: r.t.name, Part: "value", Op: "encode", Err: err}
		}
		if v == nil {
			v = []byte{}
		}
	}
	return k, v, nil
}

// Emission is one record a handler or fold asks the runtime to send. It is
// a value: minted by the sink topic (Topic.Send), comparable in tests with
// reflect.DeepEqual, and encoded, partitioned, stamped and produced by the
// runtime inside the step's transaction.
type Emission struct {
	data    payload
	ts      time.Time
	hasTS   bool
	headers []Header
}

// Topic returns the name of the emission's topic ("" for the zero Emission).
func (e Emission) Topic() string {
	if e.data == nil {
		return ""
	}
	return e.data.topicName()
}

// Key returns the emission's key and whether it is non-nil.
func (e Emission) Key() (any, bool) {
	if e.data == nil {
		return nil, false
	}
	return e.data.key()
}

// Value returns the emission's value and whether it is non-nil.
func (e Emission) Value() (any, bool) {
	if e.data == nil {
		return nil, false
	}
	return e.data.value()
}

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
	// They share memory with the fetched record: do not modify them.
	Headers []Header

	Key   K
	Value V
	// KeyIsNil and ValueIsNil say the key or value was absent on the wire
	// (Key or Value is then the zero value; codecs never saw it).
	KeyIsNil, ValueIsNil bool

	ctx context.Context
}

// Context returns the context of the record's process span when the
// application traces (Config.TracerProvider): a handler's own spans started
// from it are children of the delivery, and a handler that forwards the
// record elsewhere injects it to carry the trace on. Without tracing it is
// context.Background().
func (m Message[K, V]) Context() context.Context {
	if m.ctx == nil {
		return context.Background()
	}
	return m.ctx
}
