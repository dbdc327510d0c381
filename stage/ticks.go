package stage

// Ticks: wall-clock time as data. The declaration (Ticks, TicksFold), the
// tick topic's wiring and checks, and each task's tick schedule.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Tick is a delivered tick: wall-clock time as data. The runtime emitted it
// to the stage's tick topic inside a step, stamped like any emission, and
// delivered it back through the causal gate; so its stamp is a cut of
// everything the task had received when the interval fired, and a tick
// emitted while a record is held is held behind that record's causes too.
type Tick struct {
	// Time is the wall-clock time at emission, in milliseconds.
	Time      time.Time
	Partition int32 // the task's partition
	Offset    int64 // the tick record's offset on the tick topic
}

// TickHandler maps a tick to emissions. It is pure, like a Handler.
type TickHandler func(t Tick) ([]Emission, error)

// TickFold steps the stage's tick state: one reserved per-partition slot of
// the stage's state type, distinct from every key's slot (the nil key's
// included), initialised to the stage's initial value, persisted with the
// step. Returning Drop deletes it; Keep leaves it.
type TickFold[S any] func(state S, t Tick) (Step[S], error)

// TickTopic returns the name of a ticking stage's tick topic in
// application appID: "<appID>-<stage>-ticks". It must exist before the
// application starts, with exactly as many partitions as the stage's widest
// source. A short retention is enough, provided it covers consumer lag.
func TickTopic(appID, stage string) string { return appID + "-" + stage + "-ticks" }

type tickDecl struct {
	every   time.Duration
	fold    bool
	resolve func(state any) (func(*rawMessage, stateIO) ([]Emission, error), error)
}

// tickSpec is a built stage's tick declaration.
type tickSpec struct {
	every  time.Duration
	fold   bool
	invoke func(*rawMessage, stateIO) ([]Emission, error)
}

// Ticks declares that the stage ticks every interval: once per interval
// each task emits a tick and h handles it when it is delivered. The
// interval is a cadence floor, not an exact schedule: a tick is delivered
// after its step commits, and can be held behind causes.
func (b *Builder) Ticks(every time.Duration, h TickHandler) *Builder {
	if !b.tickDecl(every) {
		return b
	}
	if h == nil {
		b.errf("nil tick handler")
		return b
	}
	b.tick = &tickDecl{every: every, resolve: func(any) (func(*rawMessage, stateIO) ([]Emission, error), error) {
		return func(m *rawMessage, _ stateIO) (es []Emission, err error) {
			defer catch(&err)
			t, err := decodeTick(m)
			if err != nil {
				return nil, err
			}
			return h(t)
		}, nil
	}}
	return b
}

// TicksFold declares ticks handled by a fold over the stage's tick state,
// which WithState declares with the same state type S.
func TicksFold[S any](b *Builder, every time.Duration, f TickFold[S]) *Builder {
	if !b.tickDecl(every) {
		return b
	}
	if f == nil {
		b.errf("nil tick fold")
		return b
	}
	name := b.name
	b.tick = &tickDecl{every: every, fold: true, resolve: func(st any) (func(*rawMessage, stateIO) ([]Emission, error), error) {
		if st == nil {
			return nil, fmt.Errorf("%w: stage %q: tick fold but no state declared (WithState)", ErrInvalidStage, name)
		}
		sd, ok := st.(*stateDecl[S])
		if !ok {
			return nil, fmt.Errorf("%w: stage %q: tick fold has state type %v, the stage declares %v",
				ErrInvalidStage, name, reflect.TypeFor[S](), reflect.TypeOf(st).Elem().Field(1).Type)
		}
		return func(m *rawMessage, io stateIO) (es []Emission, err error) {
			defer catch(&err)
			t, err := decodeTick(m)
			if err != nil {
				return nil, err
			}
			return applyFold(sd, io, func(s S) (Step[S], error) { return f(s, t) })
		}, nil
	}}
	return b
}

func (b *Builder) tickDecl(every time.Duration) bool {
	if b.tick != nil {
		b.errf("ticks declared twice")
		return false
	}
	if every <= 0 {
		b.errf("tick interval %v is not positive", every)
		return false
	}
	return true
}

// buildTick resolves the tick declaration against the stage's state.
func (b *Builder) buildTick(s *Stage) error {
	if b.tick == nil {
		return nil
	}
	inv, err := b.tick.resolve(b.state)
	if err != nil {
		return err
	}
	s.tick = &tickSpec{every: b.tick.every, fold: b.tick.fold, invoke: inv}
	return nil
}

// TickInterval returns the stage's tick interval, or 0 if it does not tick.
func (s *Stage) TickInterval() time.Duration {
	if s.tick == nil {
		return 0
	}
	return s.tick.every
}

// A tick record: the key is the task partition (4 bytes, big-endian), the
// value the emission time in Unix milliseconds (8 bytes, big-endian).
func decodeTick(m *rawMessage) (Tick, error) {
	if len(m.value) != 8 {
		return Tick{}, &CodecError{Topic: m.topic, Part: "value", Op: "decode", Err: fmt.Errorf("tick value has %d bytes, want 8", len(m.value))}
	}
	ms := int64(binary.BigEndian.Uint64(m.value))
	return Tick{Time: time.UnixMilli(ms), Partition: m.partition, Offset: m.offset}, nil
}

// tickSchedule is when a task's next tick is due. A tick emitted in the
// open step is pending until the step ends: a commit schedules the next one
// an interval after it, an abort forgets it and the rebuilt node redoes it.
type tickSchedule struct {
	next    time.Time
	at      time.Time // when the pending tick was emitted
	pending bool
}

// start schedules a ticking stage's first tick one interval from now.
func (s *tickSchedule) start(spec *tickSpec, now time.Time) {
	if spec != nil {
		s.next = now.Add(spec.every)
	}
}

// committed schedules the next tick after a commit and reports whether the
// step emitted one.
func (s *tickSchedule) committed(spec *tickSpec) bool {
	if !s.pending {
		return false
	}
	s.next = s.at.Add(spec.every)
	s.pending = false
	return true
}

func (s *tickSchedule) aborted() { s.pending = false }

// tickIfDue runs a task's tick inside the open step, after the step's
// records were fed, so the tick claims them; it commits or aborts with the
// step. (The truncation sweep runs before feeding: sweepIfDue.)
func (t *task) tickIfDue(ctx context.Context, p producer) error {
	if t.node == nil {
		return nil
	}
	if now := t.env.clock(); t.timers.tickDue(now) {
		return t.emitTick(ctx, p, now)
	}
	return nil
}

// emitTick sends one stamped tick to the task's own partition of its tick
// topic, inside the step's transaction.
func (t *task) emitTick(ctx context.Context, p producer, now time.Time) error {
	name := t.tickTopic
	ch := headers.Channel{Topic: t.env.topics[name].id, Partition: t.partition}
	if err := t.node.PrepareSendInto(&t.sends.stamp, ch); err != nil {
		return t.stepErr(name, -1, err)
	}
	hs, err := headers.AppendStamp(make([]kgo.RecordHeader, 0, 3), &t.sends.stamp, headers.DialectVC)
	if err != nil {
		return t.stepErr(name, -1, err)
	}
	ms := now.UnixMilli()
	t.sends.produce(ctx, p, &kgo.Record{
		Topic: name, Partition: t.partition,
		Key:     binary.BigEndian.AppendUint32(nil, uint32(t.partition)),
		Value:   binary.BigEndian.AppendUint64(nil, uint64(ms)),
		Headers: hs, Timestamp: time.UnixMilli(ms),
	})
	t.timers.ticks.pending, t.timers.ticks.at = true, now
	return nil
}

// wireTicks resolves each ticking stage's tick topic (it depends on the
// application ID) and checks that no stage consumes or sends to another
// stage's tick topic.
func (tp *topology) wireTicks() error {
	tp.tickTopic = make([]string, len(tp.stages))
	tp.tickBind = make([]*binding, len(tp.stages))
	ticks := make(map[string]string)
	for i, s := range tp.stages {
		if s.tick == nil {
			continue
		}
		name := TickTopic(tp.appID, s.name)
		tp.tickTopic[i] = name
		tp.tickBind[i] = &binding{topic: name, fold: s.tick.fold, tick: true, invoke: s.tick.invoke}
		tp.bySource[name] = append(tp.bySource[name], i)
		ticks[name] = s.name
	}
	var errs []error
	for _, s := range tp.stages {
		for _, b := range s.sources {
			if owner, ok := ticks[b.topic]; ok {
				errs = append(errs, fmt.Errorf("%w: stage %q consumes %q, the tick topic of stage %q", ErrInvalidConfig, s.name, b.topic, owner))
			}
		}
		for _, k := range s.sinks {
			if owner, ok := ticks[k.topicName()]; ok {
				errs = append(errs, fmt.Errorf("%w: stage %q sends to %q, the tick topic of stage %q", ErrInvalidConfig, s.name, k.topicName(), owner))
			}
		}
	}
	return errors.Join(errs...)
}

// checkTickTopics resolves the tick topics: each must exist with exactly
// the partition count of its stage's widest source.
func (tp *topology) checkTickTopics(ctx context.Context) error {
	var names []string
	for _, n := range tp.tickTopic {
		if n != "" {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return nil
	}
	md, err := tp.admin.Metadata(ctx, names...)
	if err != nil {
		return fmt.Errorf("stage: metadata: %w", err)
	}
	var errs []error
	for i, n := range tp.tickTopic {
		if n == "" {
			continue
		}
		td, ok := md.Topics[n]
		if !ok || td.Err != nil || len(td.Partitions) == 0 {
			errs = append(errs, fmt.Errorf("%w: stage %q ticks: missing tick topic %q (create it with as many partitions as the stage's widest source)", ErrTopology, tp.stages[i].name, n))
			continue
		}
		id := headers.TopicID(td.ID)
		parts := int32(len(td.Partitions))
		if tp.topics == nil {
			tp.topics = make(map[string]topicMeta)
			tp.idName = make(map[headers.TopicID]string)
		}
		tp.topics[n] = topicMeta{id: id, partitions: parts}
		tp.idName[id] = n
		var widest int32
		for _, b := range tp.stages[i].sources {
			widest = max(widest, tp.topics[b.topic].partitions)
		}
		if widest > 0 && parts != widest {
			errs = append(errs, fmt.Errorf("%w: stage %q: tick topic %q has %d partitions, its widest source has %d; they must agree exactly", ErrTopology, tp.stages[i].name, n, parts, widest))
		}
	}
	return errors.Join(errs...)
}

// tickToStart reports the starting position on the tick topic to a newly
// built node, as build does for the sources (host duty H2 at start).
func (t *task) tickToStart(ctx context.Context, p producer, starts map[string]map[int32]int64) error {
	name := t.tickTopic
	if name == "" {
		return nil
	}
	pos, ok := starts[name][t.partition]
	if !ok || pos <= 0 {
		return nil
	}
	ds, err := t.node.PositionAdvance(headers.Channel{Topic: t.env.topics[name].id, Partition: t.partition}, pos)
	if err != nil {
		return t.stepErr(name, pos, err)
	}
	return t.deliver(ctx, p, ds)
}
