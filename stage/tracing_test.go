package stage

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// heldRun is what heldScenario saw happen, for the spans to be checked
// against: the producers' spans and the instants that bound the hold.
type heldRun struct {
	cause, effect trace.SpanContext // the producing spans of x@0 and y@0
	started       time.Time         // before the application started (y@0 was already in its topic)
	heldSeen      time.Time         // ExplainHolds first showed y@0 held
	causeSent     time.Time         // just before x@0 was produced
	done          time.Time         // both outputs read back
	out           []*kgo.Record
	handler       trace.SpanContext // Message.Context's span in y's handler, last call
}

// heldScenario runs a stage over x and y where y@0 claims x@0 and is
// produced first: the gate holds it, the test waits hold (real time), then
// produces x@0, and both are delivered, x first. Each input is produced
// under a span of tp's, its context in the record's traceparent header, as
// a traced upstream producer would. fail, if set, is called in y's handler
// (an error aborts the step).
func heldScenario(t *testing.T, tp trace.TracerProvider, hold time.Duration, fail func() error) heldRun {
	t.Helper()
	e := newEnv(t, broker.Topic{Name: "x"}, broker.Topic{Name: "y"}, broker.Topic{Name: "out"})
	out := NewTopic("out", String(), String())
	var handler atomic.Value
	b := Named("join")
	On(b, NewTopic("x", String(), String()), func(m Message[string, string]) ([]Emission, error) {
		return []Emission{out.Send(m.Key, "x:"+m.Value)}, nil
	})
	On(b, NewTopic("y", String(), String()), func(m Message[string, string]) ([]Emission, error) {
		handler.Store(trace.SpanContextFromContext(m.Context()))
		if fail != nil {
			if err := fail(); err != nil {
				return nil, err
			}
		}
		return []Emission{out.Send(m.Key, "y:"+m.Value)}, nil
	})
	st := b.Into(out).MustBuild()
	e.changelogs(1, st)

	producer := tp.Tracer("test-producer")
	produce := func(r *kgo.Record, name string) trace.SpanContext {
		ctx, span := producer.Start(context.Background(), name, trace.WithSpanKind(trace.SpanKindProducer))
		propagation.TraceContext{}.Inject(ctx, kotel.NewRecordCarrier(r))
		e.produce(r)
		span.End()
		return span.SpanContext()
	}
	var s headers.Stamp
	s.Clock.SetOffset(headers.Channel{Topic: e.topicID("x"), Partition: 0}, 0)
	var run heldRun
	run.effect = produce(stamped(t, "y", 0, "k", "effect", &s), "produce y")

	run.started = time.Now()
	cfg := e.config("i1")
	cfg.TracerProvider = tp
	if fail != nil {
		cfg.OnStepError = RetryOnError
	}
	r := e.start(cfg, st)
	waitFor(t, 20*time.Second, "y@0 held", func() bool { return len(r.app.ExplainHolds()) == 1 })
	run.heldSeen = time.Now()
	time.Sleep(hold)
	run.causeSent = time.Now()
	run.cause = produce(rec("x", 0, "k", "cause"), "produce x")
	run.out = e.readCommitted("out", 2, 20*time.Second)
	run.done = time.Now()
	run.handler, _ = handler.Load().(trace.SpanContext)
	if got := values(run.out); !slices.Equal(got, []string{"x:cause", "y:effect"}) {
		t.Fatalf("out = %q, want x:cause then y:effect", got)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	return run
}

func attrOf(s sdktrace.ReadOnlySpan, k attribute.Key) (attribute.Value, bool) {
	for _, a := range s.Attributes() {
		if a.Key == k {
			return a.Value, true
		}
	}
	return attribute.Value{}, false
}

func spansNamed(spans []sdktrace.ReadOnlySpan, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range spans {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

func linkTo(s sdktrace.ReadOnlySpan, to trace.SpanContext, role string) bool {
	for _, l := range s.Links() {
		if l.SpanContext.TraceID() == to.TraceID() && l.SpanContext.SpanID() == to.SpanID() {
			for _, a := range l.Attributes {
				if a.Key == AttrLinkRole && a.Value.AsString() == role {
					return true
				}
			}
		}
	}
	return false
}

func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[attribute.Key]any) {
	t.Helper()
	for k, w := range want {
		v, ok := attrOf(s, k)
		if !ok || v.AsInterface() != w {
			t.Errorf("%s: %s = %v (present %v), want %v", s.Name(), k, v.AsInterface(), ok, w)
		}
	}
}

// TestTracingHeldRecord checks the spans of a record the gate held behind
// its cause: a hold span from its fetch to its delivery, with the cause's
// channel, offset and diagnosis as attributes and a link to the cause's
// producing span; one process span per delivered record, linked to its
// producer, the held one a child of its hold span; kotel's publish span of
// each output a child of its process span, whose context the output
// carries; and no hold span for the record delivered at once.
func TestTracingHeldRecord(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	run := heldScenario(t, tp, 300*time.Millisecond, nil)
	spans := rec.Ended()

	holds := spansNamed(spans, "y hold")
	if len(holds) != 1 || len(spansNamed(spans, "x hold")) != 0 {
		t.Fatalf("hold spans: %d for y, %d for x; want 1 and 0", len(holds), len(spansNamed(spans, "x hold")))
	}
	h := holds[0]
	wantAttrs(t, h, map[attribute.Key]any{
		AttrStage: "join", AttrHoldCode: "vc-hold-not-fetched", AttrHoldClaim: "offset",
		AttrCauseTopic: "x", AttrCausePart: int64(0), AttrCauseOffset: int64(0),
		AttrStepOutcome: "committed", AttrHoldRestored: false, AttrHoldUnmet: int64(1),
		"messaging.source.name": "y", "messaging.kafka.message.offset": int64(0),
	})
	// The hold began at the fetch (after the start, before it was seen
	// held) and ended at the delivery (after the cause was sent).
	if h.StartTime().Before(run.started) || h.StartTime().After(run.heldSeen) {
		t.Errorf("hold starts %v, want within [%v, %v]", h.StartTime(), run.started, run.heldSeen)
	}
	if h.EndTime().Before(run.causeSent) || h.EndTime().After(run.done) {
		t.Errorf("hold ends %v, want within [%v, %v]", h.EndTime(), run.causeSent, run.done)
	}
	if !linkTo(h, run.cause, "cause") {
		t.Errorf("hold span links %+v, want the cause's producing span %v", h.Links(), run.cause.SpanID())
	}
	if h.SpanContext().TraceID() != run.effect.TraceID() {
		t.Errorf("hold span in trace %v, want the held record's %v", h.SpanContext().TraceID(), run.effect.TraceID())
	}

	for _, c := range []struct {
		topic    string
		producer trace.SpanContext
		held     bool
	}{{"x", run.cause, false}, {"y", run.effect, true}} {
		ps := spansNamed(spans, c.topic+" process")
		if len(ps) != 1 {
			t.Fatalf("%d process spans for %s, want 1", len(ps), c.topic)
		}
		p := ps[0]
		wantAttrs(t, p, map[attribute.Key]any{AttrHeld: c.held, AttrStepOutcome: "committed", "messaging.operation": "process"})
		if !linkTo(p, c.producer, "producer") {
			t.Errorf("%s process links %+v, want its producer %v", c.topic, p.Links(), c.producer.SpanID())
		}
		if p.SpanContext().TraceID() != c.producer.TraceID() {
			t.Errorf("%s process in trace %v, want its producer's %v", c.topic, p.SpanContext().TraceID(), c.producer.TraceID())
		}
		if c.held && run.handler.SpanID() != p.SpanContext().SpanID() {
			t.Errorf("y's handler saw span %v in Message.Context, want its process span %v", run.handler.SpanID(), p.SpanContext().SpanID())
		}
		if c.held && p.Parent().SpanID() != h.SpanContext().SpanID() {
			t.Errorf("y process parent %v, want its hold span %v", p.Parent().SpanID(), h.SpanContext().SpanID())
		}
		if !c.held {
			// A record delivered at once is a child of kotel's receive span.
			recv := spansNamed(spans, c.topic+" receive")
			if len(recv) == 0 || p.Parent().SpanID() != recv[len(recv)-1].SpanContext().SpanID() {
				t.Errorf("x process parent %v, want kotel's receive span", p.Parent().SpanID())
			}
		}
		// The output carries the context of kotel's publish span, a child
		// of the process span.
		var pub sdktrace.ReadOnlySpan
		for _, s := range spansNamed(spans, "out publish") {
			if s.Parent().SpanID() == p.SpanContext().SpanID() {
				pub = s
			}
		}
		if pub == nil {
			t.Fatalf("no out publish span under %s process", c.topic)
		}
		o := run.out[0]
		if c.held {
			o = run.out[1]
		}
		got := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), kotel.NewRecordCarrier(o)))
		if got.SpanID() != pub.SpanContext().SpanID() {
			t.Errorf("output %q carries span %v, want its publish span %v", o.Value, got.SpanID(), pub.SpanContext().SpanID())
		}
		// The traceparent beside the stamp leaves the stamp intact.
		var s headers.Stamp
		if err := headers.ReadStamp(&s, o.Headers); err != nil || !s.Tagged {
			t.Errorf("output %q: stamp %+v, %v; want a tagged vc stamp", o.Value, s, err)
		}
	}
	// Changelog records are not traced.
	for _, s := range spans {
		if v, ok := attrOf(s, "messaging.destination.name"); ok && v.AsString() == ChangelogTopic("app", "join") {
			t.Errorf("span %q for a changelog record", s.Name())
		}
	}
}

// TestTracingAbortedStepRedone checks what an aborted step emits: its
// spans end with outcome "aborted" and an error status, and the step that
// redoes it emits the record's hold again from the same first fetch, with
// outcome "committed". Exactly one committed process span per record.
func TestTracingAbortedStepRedone(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	var calls atomic.Int32
	heldScenario(t, tp, 100*time.Millisecond, func() error {
		if calls.Add(1) == 1 {
			return errors.New("transient")
		}
		return nil
	})
	spans := rec.Ended()
	outcome := func(s sdktrace.ReadOnlySpan) string { v, _ := attrOf(s, AttrStepOutcome); return v.AsString() }
	var aborted, committed []sdktrace.ReadOnlySpan
	for _, s := range spansNamed(spans, "y hold") {
		if outcome(s) == "aborted" {
			aborted = append(aborted, s)
		} else if outcome(s) == "committed" {
			committed = append(committed, s)
		}
	}
	if len(aborted) != 1 || len(committed) != 1 {
		t.Fatalf("y hold spans: %d aborted, %d committed; want 1 and 1", len(aborted), len(committed))
	}
	if aborted[0].Status().Code != codes.Error || committed[0].Status().Code == codes.Error {
		t.Errorf("statuses: aborted %v, committed %v", aborted[0].Status(), committed[0].Status())
	}
	if !aborted[0].StartTime().Equal(committed[0].StartTime()) {
		t.Errorf("redone hold starts %v, want the first fetch %v", committed[0].StartTime(), aborted[0].StartTime())
	}
	for _, topic := range []string{"x", "y"} {
		n := 0
		for _, s := range spansNamed(spans, topic+" process") {
			if outcome(s) == "committed" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d committed %s process spans, want 1", n, topic)
		}
	}
}

// TestTracingOffStartsNoSpans: without a TracerProvider the runtime starts
// no span and adds no header: the outputs carry the stamp only.
func TestTracingOffStartsNoSpans(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	e := newEnv(t, broker.Topic{Name: "in"}, broker.Topic{Name: "out"})
	out := NewTopic("out", String(), String())
	st := On(Named("plain"), NewTopic("in", String(), String()), func(m Message[string, string]) ([]Emission, error) {
		return []Emission{out.Send(m.Key, m.Value)}, nil
	}).Into(out).MustBuild()
	e.changelogs(1, st)
	in := rec0("in", "v")
	ctx, span := tp.Tracer("test").Start(context.Background(), "produce")
	propagation.TraceContext{}.Inject(ctx, kotel.NewRecordCarrier(in))
	span.End()
	e.produce(in)
	e.start(e.config("i1"), st)
	got := e.readCommitted("out", 1, 20*time.Second)
	if len(got) != 1 {
		t.Fatalf("read %d outputs, want 1", len(got))
	}
	for _, h := range got[0].Headers {
		if h.Key == "traceparent" {
			t.Errorf("output carries traceparent %q with tracing off", h.Value)
		}
	}
	if n := len(rec.Ended()); n != 1 {
		t.Errorf("%d spans ended, want only the test's own", n)
	}
}

func rec0(topic, value string) *kgo.Record { return rec(topic, 0, "k", value) }
