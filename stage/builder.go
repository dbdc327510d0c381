package stage

// Declaring a stage: the Builder, its sources, state and sinks, and the
// handler and fold types user logic is written in.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/state"
)

// Handler maps one delivered message to its emissions. It is pure: it
// reads the message and returns values; the runtime does the rest in the
// step's transaction. An error fails the step (see Config.OnStepError).
type Handler[K, V any] func(m Message[K, V]) ([]Emission, error)

// Fold maps a key's state and one delivered message to a Step: the next
// state and the emissions. The state is the key's committed state, or the
// stage's initial value for a key never seen. An error fails the step.
type Fold[S, K, V any] func(state S, m Message[K, V]) (Step[S], error)

// Step is a fold's result: the next state of the message's key and the
// emissions. A nil next state (for pointer, map, slice or interface state
// types) deletes the key's state, as does Delete.
type Step[S any] struct {
	State     S
	Emissions []Emission
	// Delete removes the key's state.
	Delete bool
	// keep leaves the key's stored state untouched (Keep, RecoveringFold).
	keep bool
}

// Next returns a step to state s with emissions es.
func Next[S any](s S, es ...Emission) Step[S] { return Step[S]{State: s, Emissions: es} }

// Drop returns a step that deletes the key's state, with emissions es.
func Drop[S any](es ...Emission) Step[S] { return Step[S]{Delete: true, Emissions: es} }

// Keep returns a step that leaves the key's stored state as it is (for an
// unseen key: absent), with emissions es.
func Keep[S any](es ...Emission) Step[S] { return Step[S]{keep: true, Emissions: es} }

// Recovering wraps a handler whose errors are deterministic domain
// failures: an error from h becomes the emissions recover returns
// (typically to a declared error sink), committed with the step. Wrap only
// logic whose errors recur for the same message: a transient failure caught
// here routes a good record to the error sink irrevocably, where the plain
// handler's abort-and-retry would deliver it. A panic is not recovered: it
// fails the step.
func Recovering[K, V any](h Handler[K, V], recover func(m Message[K, V], err error) []Emission) Handler[K, V] {
	return func(m Message[K, V]) ([]Emission, error) {
		es, err := h(m)
		if err != nil {
			return recover(m, err), nil
		}
		return es, nil
	}
}

// RecoveringFold is Recovering for folds: on an error from f, the key's
// state stays unchanged and the step carries recover's emissions.
func RecoveringFold[S, K, V any](f Fold[S, K, V], recover func(state S, m Message[K, V], err error) []Emission) Fold[S, K, V] {
	return func(s S, m Message[K, V]) (Step[S], error) {
		st, err := f(s, m)
		if err != nil {
			return Keep[S](recover(s, m, err)...), nil
		}
		return st, nil
	}
}

// Stage is a built, validated stage declaration: a name, the source topics
// with their handlers or folds, the sinks, and optional per-key state.
// Build one with Named.
type Stage struct {
	name     string
	sources  []binding
	sinks    []Sink
	sinkSet  map[string]bool
	hasState bool
	tick     *tickSpec // ticks.go
	// externals are sinks outside Kafka (IntoExternal).
	externals []External
}

// Name returns the stage name. It keys the stage's state and changelog:
// keep it stable across deployments.
func (s *Stage) Name() string { return s.name }

// Sources returns the source topic names in declaration order.
func (s *Stage) Sources() []string {
	out := make([]string, len(s.sources))
	for i, b := range s.sources {
		out[i] = b.topic
	}
	return out
}

// Sinks returns the sink topic names in declaration order; SinkTopics
// returns the same sinks as typed topics.
func (s *Stage) Sinks() []string {
	out := make([]string, len(s.sinks))
	for i, k := range s.sinks {
		out[i] = k.topicName()
	}
	return out
}

// ChangelogTopic returns the name of the stage's changelog topic in
// application appID: "<appID>-<stage>-changelog". It must exist, compacted
// (cleanup.policy=compact), with as many partitions as the stage's sources.
func ChangelogTopic(appID, stage string) string { return state.ChangelogTopic(appID, stage) }

// binding is one source of a stage, type-erased.
type binding struct {
	topic  string
	fold   bool
	tick   bool // the stage's tick topic: a fold uses the tick slot (ticks.go)
	invoke func(m *rawMessage, st stateIO) ([]Emission, error)
	// newAhead makes a task's decoder of this source's records ahead of
	// their delivery (decodeahead.go); nil for the tick topic.
	newAhead func() aheadDecoder
}

// rawMessage is a delivered record before decoding.
type rawMessage struct {
	topic      string
	partition  int32
	offset     int64
	coord      headers.Coordinate
	ts         time.Time
	key, value []byte
	headers    []Header

	// The record's decoding by a worker, when one ran ahead
	// (decodeahead.go): ahead's window index aheadAt.
	ahead   aheadDecoder
	aheadAt int

	ctx context.Context // its process span's, when tracing (tracing.go)
}

// stateIO is a fold's view of one key's state within the step.
type stateIO interface {
	load() ([]byte, bool, error)
	store([]byte) error
	del() error
}

type stateDecl[S any] struct {
	codec   Codec[S]
	initial S
	// nilable: S is a pointer, map, slice, interface, channel or function
	// type, whose nil value deletes the key's state. Decided once at
	// declaration, so a fold step over any other type uses no reflection.
	nilable bool
	// fresh: initial may share memory with what a fold makes of it (S
	// holds a pointer, slice, map...; a zero-copy view), so every unseen
	// key gets its own copy, decoded from the initial's encoding: a fold
	// that updates its state in place must not change the next key's
	// start. Decided once at declaration.
	fresh bool
	init  struct {
		once sync.Once
		enc  []byte
		err  error
	}
}

// Builder declares a stage. Methods record problems instead of failing;
// Build reports them all.
type Builder struct {
	name     string
	pending  []func(state any) (binding, error)
	topics   []string
	sinks    []Sink
	state    any // *stateDecl[S]
	hasState bool
	tick     *tickDecl // ticks.go
	errs     []error
	// externals are sinks outside Kafka (IntoExternal).
	externals []External
}

// Named starts the declaration of a stage.
func Named(name string) *Builder { return &Builder{name: name} }

func (b *Builder) errf(format string, args ...any) {
	b.errs = append(b.errs, fmt.Errorf("%w: stage %q: "+format, append([]any{ErrInvalidStage, b.name}, args...)...))
}

// WithState declares per-key state: its codec and the value a fold sees for
// a key it has never seen. State is keyed by the message key's encoded
// bytes (a nil key is distinct from an empty one) and scoped to the stage.
func WithState[S any](b *Builder, codec Codec[S], initial S) *Builder {
	if b.hasState {
		b.errf("state declared twice")
	}
	if codec == nil {
		b.errf("state declared with a nil codec")
	}
	sd := &stateDecl[S]{codec: codec, initial: initial, nilable: nilable[S]()}
	sd.fresh = sharesMemory(reflect.TypeFor[S]()) && !(sd.nilable && isNil(initial))
	b.state, b.hasState = sd, true
	return b
}

// On adds a source topic with a stateless handler.
func On[K, V any](b *Builder, t *Topic[K, V], h Handler[K, V]) *Builder {
	if !b.source(t) {
		return b
	}
	if h == nil {
		b.errf("nil handler for topic %q", t.name)
		return b
	}
	b.pending = append(b.pending, func(any) (binding, error) {
		return binding{topic: t.name, newAhead: aheadOf(t), invoke: func(m *rawMessage, _ stateIO) (es []Emission, err error) {
			defer catch(&err)
			msg, err := decode(t, m)
			if err != nil {
				return nil, err
			}
			return h(msg)
		}}, nil
	})
	return b
}

// OnFold adds a source topic folded over the stage's per-key state, which
// WithState must declare with the same state type S.
func OnFold[S, K, V any](b *Builder, t *Topic[K, V], f Fold[S, K, V]) *Builder {
	if !b.source(t) {
		return b
	}
	if f == nil {
		b.errf("nil fold for topic %q", t.name)
		return b
	}
	name := t.name
	b.pending = append(b.pending, func(st any) (binding, error) {
		if st == nil {
			return binding{}, fmt.Errorf("%w: stage %q: fold on %q but no state declared (WithState)", ErrInvalidStage, b.name, name)
		}
		sd, ok := st.(*stateDecl[S])
		if !ok {
			return binding{}, fmt.Errorf("%w: stage %q: fold on %q has state type %v, the stage declares %v",
				ErrInvalidStage, b.name, name, reflect.TypeFor[S](), reflect.TypeOf(st).Elem().Field(1).Type)
		}
		return binding{topic: name, fold: true, newAhead: aheadOf(t), invoke: func(m *rawMessage, io stateIO) (es []Emission, err error) {
			defer catch(&err)
			msg, err := decode(t, m)
			if err != nil {
				return nil, err
			}
			return applyFold(sd, io, func(s S) (Step[S], error) { return f(s, msg) })
		}}, nil
	})
	return b
}

// applyFold loads a key's or the tick slot's state (or the initial value),
// applies step and stores, deletes or keeps the result.
func applyFold[S any](sd *stateDecl[S], io stateIO, step func(S) (Step[S], error)) ([]Emission, error) {
	s := sd.initial
	raw, ok, err := io.load()
	if err != nil {
		return nil, err
	}
	if !ok && sd.fresh {
		if raw, err = sd.initialBytes(); err != nil {
			return nil, err
		}
		ok = true
	}
	if ok {
		if s, err = sd.codec.Decode(raw); err != nil {
			return nil, &CodecError{Part: "state", Op: "decode", Err: err}
		}
	}
	st, err := step(s)
	if err != nil {
		return nil, err
	}
	switch {
	case st.keep:
	case st.Delete || sd.nilable && isNil(st.State):
		err = io.del()
	default:
		enc, eerr := sd.codec.Encode(st.State)
		if eerr != nil {
			return nil, &CodecError{Part: "state", Op: "encode", Err: eerr}
		}
		if enc == nil {
			enc = []byte{}
		}
		err = io.store(enc)
	}
	return st.Emissions, err
}

// initialBytes returns a new copy of the initial state's encoding, encoded
// once.
func (sd *stateDecl[S]) initialBytes() ([]byte, error) {
	in := &sd.init
	in.once.Do(func() {
		defer catch(&in.err)
		enc, err := sd.codec.Encode(sd.initial)
		if err != nil {
			in.err = &CodecError{Part: "state", Op: "encode", Err: fmt.Errorf("initial state: %w", err)}
			return
		}
		in.enc = append([]byte{}, enc...) // never nil: codecs never see nil
	})
	if in.err != nil {
		return nil, in.err
	}
	return bytes.Clone(in.enc), nil
}

// sharesMemory reports whether values of t may share memory with each
// other: t is or holds a pointer, slice, map, interface, channel or
// function. Strings are immutable and share nothing mutable.
func sharesMemory(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return true
	case reflect.Array:
		return t.Len() > 0 && sharesMemory(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if sharesMemory(t.Field(i).Type) {
				return true
			}
		}
	}
	return false
}

func (b *Builder) source(t interface{ topicName() string }) bool {
	if t == nil || reflect.ValueOf(t).IsNil() {
		b.errf("nil source topic")
		return false
	}
	name := t.topicName()
	if err := checkTopicName(name); err != nil {
		b.errf("source topic: %v", err)
		return false
	}
	if slices.Contains(b.topics, name) {
		b.errf("topic %q consumed twice", name)
		return false
	}
	b.topics = append(b.topics, name)
	return true
}

// Into declares the topics the stage may send to. Emitting to any other
// topic fails the step with ErrUndeclaredSink.
func (b *Builder) Into(sinks ...Sink) *Builder {
	for _, s := range sinks {
		if s == nil || reflect.ValueOf(s).IsNil() {
			b.errf("nil sink")
			continue
		}
		if err := checkTopicName(s.topicName()); err != nil {
			b.errf("sink: %v", err)
			continue
		}
		if slices.ContainsFunc(b.sinks, func(have Sink) bool { return have.topicName() == s.topicName() }) {
			b.errf("sink %q declared twice", s.topicName())
			continue
		}
		b.sinks = append(b.sinks, s)
	}
	return b
}

// Build validates the declaration and returns the stage, or every problem
// found, each wrapping ErrInvalidStage.
func (b *Builder) Build() (*Stage, error) {
	errs := append([]error(nil), b.errs...)
	if err := checkName(b.name); err != nil {
		errs = append(errs, fmt.Errorf("%w: stage name: %v", ErrInvalidStage, err))
	}
	if len(b.pending) == 0 {
		errs = append(errs, fmt.Errorf("%w: stage %q has no sources", ErrInvalidStage, b.name))
	}
	s := &Stage{name: b.name, sinks: b.sinks, sinkSet: make(map[string]bool), hasState: b.hasState, externals: b.externals}
	folds := 0
	for _, p := range b.pending {
		bd, err := p(b.state)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if bd.fold {
			folds++
		}
		s.sources = append(s.sources, bd)
	}
	if err := b.buildTick(s); err != nil {
		errs = append(errs, err)
	} else if s.tick != nil && s.tick.fold {
		folds++
	}
	if b.hasState && folds == 0 {
		errs = append(errs, fmt.Errorf("%w: stage %q declares state but no source folds over it", ErrInvalidStage, b.name))
	}
	if len(b.sinks) == 0 && !b.hasState && len(b.externals) == 0 {
		errs = append(errs, fmt.Errorf("%w: stage %q has no sinks and no state, so it can have no effect (declare its sinks with Into)", ErrInvalidStage, b.name))
	}
	for _, k := range b.sinks {
		s.sinkSet[k.topicName()] = true
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

// MustBuild is Build that panics on error, for declarations in package-level
// wiring whose failure is a programming error.
func (b *Builder) MustBuild() *Stage {
	s, err := b.Build()
	if err != nil {
		panic(err)
	}
	return s
}

func decode[K, V any](t *Topic[K, V], m *rawMessage) (Message[K, V], error) {
	msg := Message[K, V]{
		Topic: m.topic, Partition: m.partition, Offset: m.offset, Coordinate: m.coord,
		Timestamp: m.ts, Headers: m.headers,
		KeyIsNil: m.key == nil, ValueIsNil: m.value == nil,
		ctx: m.ctx,
	}
	var err error
	if a, ok := m.ahead.(*typedAhead[K, V]); ok {
		var done bool
		if msg.Key, msg.Value, err, done = a.take(m.aheadAt); done {
			return msg, err
		}
	}
	msg.Key, msg.Value, err = decodeKV(t, m.key, m.value)
	return msg, err
}

// decodeKV decodes a record's key and value; a nil key or value stays the
// zero value.
func decodeKV[K, V any](t *Topic[K, V], key, value []byte) (k K, v V, err error) {
	if key != nil {
		if k, err = t.key.Decode(key); err != nil {
			return k, v, &CodecError{Topic: t.name, Part: "key", Op: "decode", Err: err}
		}
	}
	if value != nil {
		if v, err = t.value.Decode(value); err != nil {
			return k, v, &CodecError{Topic: t.name, Part: "value", Op: "decode", Err: err}
		}
	}
	return k, v, nil
}

func aheadOf[K, V any](t *Topic[K, V]) func() aheadDecoder {
	return func() aheadDecoder { return &typedAhead[K, V]{t: t} }
}

// catch turns a panic in user code into a *PanicError.
func catch(err *error) {
	if r := recover(); r != nil {
		*err = &PanicError{Value: r, Stack: debug.Stack()}
	}
}

// nilable reports whether S has a nil value.
func nilable[S any]() bool {
	switch reflect.TypeFor[S]().Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface, reflect.Chan, reflect.Func:
		return true
	}
	return false
}

func isNil(v any) bool {
	rv := reflect.ValueOf(v)
	if !rv.IsValid() {
		return true
	}
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface, reflect.Chan, reflect.Func:
		return rv.IsNil()
	}
	return false
}

// checkName accepts what Kafka accepts in a topic name: ASCII letters,
// digits, '.', '_' and '-'.
func checkName(s string) error {
	if s == "" {
		return errors.New("empty name")
	}
	if len(s) > 200 {
		return fmt.Errorf("name %q longer than 200 characters", s)
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("name %q has character %q; use letters, digits, '.', '_' and '-'", s, c)
		}
	}
	return nil
}

func checkTopicName(s string) error {
	if s == "." || s == ".." {
		return fmt.Errorf("topic name %q is not allowed", s)
	}
	return checkName(s)
}
