package stage

// Tracing: OpenTelemetry spans for deliveries and holds (docs/tracing.md).
//
// Off unless Config.TracerProvider is set. Then the application's client
// carries kotel's produce and fetch hooks (publish and receive spans, W3C
// trace context in record headers), and every task has a taskTracer that
// the step path consults at four points: before a record is fed to the
// gate, when a record is delivered, when an emission is produced, and when
// the step ends. Off, each point is one nil check and allocates nothing.

import (
	"context"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/buildinfo"
	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.18.0"
	"go.opentelemetry.io/otel/trace"
)

// TracerName is the instrumentation name of the spans the stage runtime
// starts itself (hold and process spans); kotel names its own.
const TracerName = "github.com/parsley-go/parsley/stage"

// Attribute keys of the spans the runtime starts, beside the messaging
// semantic conventions kotel uses (messaging.system, messaging.source.name,
// messaging.kafka.source.partition, messaging.kafka.message.offset).
const (
	AttrStage        = attribute.Key("parsley.stage")          // the stage's name
	AttrTask         = attribute.Key("parsley.task.partition") // the task's partition
	AttrHeld         = attribute.Key("parsley.held")           // process span: the record waited in the gate
	AttrStepOutcome  = attribute.Key("parsley.step.outcome")   // "committed" or "aborted"
	AttrHoldCode     = attribute.Key("parsley.hold.code")      // vc-hold-* code, or "parsley-hold-behind-head"
	AttrHoldClaim    = attribute.Key("parsley.hold.claim")     // "offset", "sequence" or "queue"
	AttrCauseTopic   = attribute.Key("parsley.hold.cause.topic")
	AttrCausePart    = attribute.Key("parsley.hold.cause.partition")
	AttrCauseOffset  = attribute.Key("parsley.hold.cause.offset") // offset claims and queue heads
	AttrCauseSender  = attribute.Key("parsley.hold.cause.sender") // sequence claims
	AttrCauseSeq     = attribute.Key("parsley.hold.cause.seq")    // sequence claims
	AttrHoldUnmet    = attribute.Key("parsley.hold.unmet")        // unmet claims at the last diagnosis
	AttrHoldRestored = attribute.Key("parsley.hold.restored")     // the hold began before this task started here
	AttrLinkRole     = attribute.Key("parsley.link")              // on links: "producer" or "cause"
)

// CodeBehindHead is the hold code of a record that waited only behind the
// head of its own channel's queue (FIFO, head-of-line blocking): its cause
// is that head, on its own channel.
const CodeBehindHead = "parsley-hold-behind-head"

// maxHoldCauses bounds what one hold remembers of the causes it waited for
// over time (span events and links), so a traced hold's memory does not
// grow with how often its diagnosis changes.
const maxHoldCauses = 8

// tracing is the application's tracing setup; nil when off.
type tracing struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	kotel  *kotel.Tracer
}

func newTracing(cfg *Config) *tracing {
	if cfg.TracerProvider == nil {
		return nil
	}
	prop := cfg.Propagator // withDefaults: W3C trace context unless set
	return &tracing{
		tracer: cfg.TracerProvider.Tracer(TracerName, trace.WithInstrumentationVersion(buildinfo.Version())),
		prop:   prop,
		kotel: kotel.NewTracer(kotel.TracerProvider(cfg.TracerProvider), kotel.TracerPropagator(prop),
			kotel.ConsumerGroup(cfg.ApplicationID)),
	}
}

// clientHooks are kotel's hooks, for the records worth a span: fetched data
// records (not transaction markers) and emissions, whose context the step
// marks. Changelog records are not traced.
type clientHooks struct{ k *kotel.Tracer }

// emissionKey marks the context of a delivery's process span, and so of
// its emissions' records.
type emissionKey struct{}

func isEmission(r *kgo.Record) bool { return r.Context != nil && r.Context.Value(emissionKey{}) != nil }

func (h clientHooks) OnProduceRecordBuffered(r *kgo.Record) {
	if isEmission(r) {
		h.k.OnProduceRecordBuffered(r)
	}
}

func (h clientHooks) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if isEmission(r) {
		h.k.OnProduceRecordUnbuffered(r, err)
	}
}

func (h clientHooks) OnFetchRecordBuffered(r *kgo.Record) {
	if !r.Attrs.IsControl() {
		h.k.OnFetchRecordBuffered(r)
	}
}

func (h clientHooks) OnFetchRecordUnbuffered(r *kgo.Record, polled bool) {
	if !r.Attrs.IsControl() {
		h.k.OnFetchRecordUnbuffered(r, polled)
	}
}

// taskTracer traces one task's deliveries and holds. It is owned by the
// session loop, like the task.
type taskTracer struct {
	*tracing
	stage     string
	partition int32
	names     map[headers.TopicID]string
	since     time.Time // when this task started here: holds restored from the store date from it

	// Records held in the gate, by coordinate, from their first fetch (an
	// aborted step's fetch included: the redo fetches the same records)
	// to the commit of the step that delivered them.
	held map[headers.Coordinate]*heldTrace
	// Causes a held record waits for, and who waits: an offset (a claim,
	// or the head of a queue) or a sender's sequence on a channel. When
	// the cause is delivered its producing span becomes a link of theirs.
	wants    map[headers.Coordinate][]headers.Coordinate
	seqWants map[seqWantKey][]seqWant

	// The record being fed and whether the gate delivered it at once.
	fetching struct {
		active    bool
		coord     headers.Coordinate
		parent    trace.SpanContext // kotel's receive span, if any
		skipped   uint64            // the node's replay count before the feed
		delivered bool
	}
	released bool // a held record was delivered since the last diagnosis

	cur       context.Context // the delivery being processed: its emissions' parent
	open      []openSpan      // the step's spans, ended when the step ends
	delivered []headers.Coordinate
}

type heldTrace struct {
	fetched   time.Time
	parent    trace.SpanContext // kotel's receive span, else the producer's
	restored  bool
	unmet     int
	causes    []holdCause // oldest first; the last is what it waited for last
	links     []trace.Link
	delivered bool // by the open step
}

type holdCause struct {
	at    time.Time
	code  string
	claim string // "offset", "sequence", "queue"
	ch    headers.Channel
	off   int64
	send  headers.SenderID
	seq   int64
}

type seqWantKey struct {
	ch     headers.Channel
	sender headers.SenderID
}

type seqWant struct {
	seq    int64
	waiter headers.Coordinate
}

type openSpan struct {
	span trace.Span
	end  time.Time // zero: ended at the step's end
}

func (tr *tracing) forTask(stage string, partition int32, names map[headers.TopicID]string) *taskTracer {
	return &taskTracer{
		tracing: tr, stage: stage, partition: partition, names: names, since: time.Now(),
		held:     make(map[headers.Coordinate]*heldTrace),
		wants:    make(map[headers.Coordinate][]headers.Coordinate),
		seqWants: make(map[seqWantKey][]seqWant),
	}
}

// fetch is called before r is fed to the gate at coord.
func (tt *taskTracer) fetch(n *protocol.Node, r *kgo.Record, coord headers.Coordinate) {
	f := &tt.fetching
	f.active, f.coord, f.delivered = true, coord, false
	f.parent = trace.SpanContext{}
	if r.Context != nil {
		f.parent = trace.SpanContextFromContext(r.Context)
	}
	f.skipped = n.Counters().ReplaysSkipped
}

// fed is called after the gate took the fed record and its deliveries were
// processed: a record neither delivered nor dropped as a replay is held.
func (tt *taskTracer) fed(n *protocol.Node) {
	f := &tt.fetching
	f.active = false
	heldNow := !f.delivered && n.Counters().ReplaysSkipped == f.skipped
	if heldNow {
		if e := tt.held[f.coord]; e == nil {
			tt.held[f.coord] = &heldTrace{fetched: time.Now(), parent: f.parent}
		} else if !e.parent.IsValid() {
			e.parent = f.parent
		}
	}
	if heldNow || tt.released {
		tt.diagnose(n, f.coord, heldNow)
	}
}

// settled is called after a node call other than OnRecord delivered
// records (a position advance, the release at build).
func (tt *taskTracer) settled(n *protocol.Node) {
	if tt.released {
		tt.diagnose(n, headers.Coordinate{}, false)
	}
}

// diagnose reads the gate's heads and records what each waits for now; a
// newly held record that is not its queue's head waits behind that head.
func (tt *taskTracer) diagnose(n *protocol.Node, fed headers.Coordinate, fedHeld bool) {
	tt.released = false
	hs, err := n.ExplainHolds()
	if err != nil {
		return // the node failed; the step fails at its next call
	}
	now := time.Now()
	for i := range hs {
		h := &hs[i]
		e := tt.entry(h.Coordinate, now)
		if fedHeld && h.Coordinate.Channel == fed.Channel && h.Coordinate != fed {
			fe := tt.entry(fed, now)
			fe.unmet = 1
			tt.addCause(fed, fe, holdCause{at: now, code: CodeBehindHead, claim: "queue", ch: h.Coordinate.Channel, off: h.Coordinate.Offset, seq: -1})
		}
		if len(h.Waiting) == 0 {
			continue
		}
		e.unmet = len(h.Waiting)
		c := primaryClaim(h.Waiting)
		hc := holdCause{at: now, code: c.Diagnosis.String(), claim: "offset", ch: c.Channel, off: c.Offset, seq: -1}
		if c.Sequence {
			hc.claim, hc.send, hc.seq = "sequence", c.Sender, c.Seq
		}
		tt.addCause(h.Coordinate, e, hc)
	}
	if len(tt.wants) > 2*len(tt.held)+64 {
		tt.compactWants()
	}
}

// primaryClaim is the most actionable unmet claim, as HeldRecord.Diagnosis
// chooses: a cause held itself only when nothing is missing outright.
func primaryClaim(ws []protocol.Claim) *protocol.Claim {
	for i := range ws {
		if ws[i].Diagnosis != protocol.HeldUpstream {
			return &ws[i]
		}
	}
	return &ws[0]
}

func (tt *taskTracer) entry(c headers.Coordinate, now time.Time) *heldTrace {
	e := tt.held[c]
	if e == nil {
		// Held when this task started here (restored from the store):
		// its wait began before, where no span recorded it.
		e = &heldTrace{fetched: tt.since, restored: true}
		tt.held[c] = e
	}
	return e
}

func (tt *taskTracer) addCause(waiter headers.Coordinate, e *heldTrace, c holdCause) {
	if k := len(e.causes); k > 0 {
		last := e.causes[k-1]
		last.at = c.at
		if last == c {
			return // still waiting for the same thing
		}
	}
	if len(e.causes) == maxHoldCauses {
		copy(e.causes, e.causes[1:]) // keep the latest
		e.causes = e.causes[:maxHoldCauses-1]
	}
	e.causes = append(e.causes, c)
	if c.claim == "sequence" {
		k := seqWantKey{c.ch, c.send}
		tt.seqWants[k] = append(tt.seqWants[k], seqWant{seq: c.seq, waiter: waiter})
		return
	}
	at := headers.Coordinate{Channel: c.ch, Offset: c.off}
	tt.wants[at] = append(tt.wants[at], waiter)
}

// compactWants drops wants whose waiters were delivered: a claim met
// without its record being delivered here (a claim below a position the
// consumer reported) is never matched.
func (tt *taskTracer) compactWants() {
	for at, ws := range tt.wants {
		ws = deleteDelivered(tt, ws)
		if len(ws) == 0 {
			delete(tt.wants, at)
		} else {
			tt.wants[at] = ws
		}
	}
	for k, ws := range tt.seqWants {
		j := 0
		for _, w := range ws {
			if tt.held[w.waiter] != nil {
				ws[j] = w
				j++
			}
		}
		if j == 0 {
			delete(tt.seqWants, k)
		} else {
			tt.seqWants[k] = ws[:j]
		}
	}
}

func deleteDelivered(tt *taskTracer, ws []headers.Coordinate) []headers.Coordinate {
	j := 0
	for _, w := range ws {
		if tt.held[w] != nil {
			ws[j] = w
			j++
		}
	}
	return ws[:j]
}

// delivering starts the spans of one delivery: its hold span if the gate
// held it, and its process span, the parent of its emissions' publish
// spans. Both end when the step ends, with the step's outcome.
func (tt *taskTracer) delivering(d *protocol.Delivery, topic string) {
	now := time.Now()
	producer := tt.prop.Extract(context.Background(), headerCarrier(d.Headers))
	psc := trace.SpanContextFromContext(producer)
	var e *heldTrace
	var parent trace.SpanContext
	if f := &tt.fetching; f.active && d.Coordinate == f.coord {
		f.delivered = true
		parent = f.parent
		delete(tt.held, d.Coordinate) // left by an aborted step that held it
	} else {
		e = tt.entry(d.Coordinate, now)
		parent = e.parent
		tt.released = true
	}
	if !parent.IsValid() {
		parent = psc
	}
	ctx := context.Background()
	if parent.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, parent)
	}
	msg := []attribute.KeyValue{
		semconv.MessagingSystemKey.String("kafka"),
		semconv.MessagingSourceKindTopic,
		semconv.MessagingSourceName(topic),
		semconv.MessagingKafkaSourcePartition(int(d.Partition)),
		semconv.MessagingKafkaMessageOffsetKey.Int64(d.Offset),
		AttrStage.String(tt.stage),
		AttrTask.Int64(int64(tt.partition)),
	}
	var links []trace.Link
	if psc.IsValid() {
		links = []trace.Link{{SpanContext: psc, Attributes: []attribute.KeyValue{AttrLinkRole.String("producer")}}}
	}
	if e != nil {
		e.delivered = true
		tt.delivered = append(tt.delivered, d.Coordinate)
		ctx = tt.startHold(ctx, topic, e, msg, now)
	}
	tt.matchWants(d, psc)
	attrs := append(msg, semconv.MessagingOperationProcess, AttrHeld.Bool(e != nil))
	ctx, span := tt.tracer.Start(ctx, topic+" process", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithTimestamp(now), trace.WithLinks(links...), trace.WithAttributes(attrs...))
	tt.cur = context.WithValue(ctx, emissionKey{}, true)
	tt.open = append(tt.open, openSpan{span: span})
}

// startHold starts a delivered record's hold span, from its fetch, with
// what it waited for; it ends at the delivery (now) when the step ends.
func (tt *taskTracer) startHold(ctx context.Context, topic string, e *heldTrace, msg []attribute.KeyValue, now time.Time) context.Context {
	attrs := append(msg[:len(msg):len(msg)], AttrHoldUnmet.Int(e.unmet), AttrHoldRestored.Bool(e.restored))
	if k := len(e.causes); k > 0 {
		attrs = append(attrs, tt.causeAttrs(&e.causes[k-1])...)
	}
	ctx, span := tt.tracer.Start(ctx, topic+" hold", trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(e.fetched), trace.WithLinks(e.links...), trace.WithAttributes(attrs...))
	for i := range e.causes {
		span.AddEvent("parsley.hold.cause", trace.WithTimestamp(e.causes[i].at), trace.WithAttributes(tt.causeAttrs(&e.causes[i])...))
	}
	tt.open = append(tt.open, openSpan{span: span, end: now})
	return ctx
}

func (tt *taskTracer) causeAttrs(c *holdCause) []attribute.KeyValue {
	a := []attribute.KeyValue{
		AttrHoldCode.String(c.code), AttrHoldClaim.String(c.claim),
		AttrCauseTopic.String(cmpOr(tt.names[c.ch.Topic], c.ch.Topic.String())),
		AttrCausePart.Int64(int64(c.ch.Partition)),
	}
	if c.claim == "sequence" {
		return append(a, AttrCauseSender.String(c.send.String()), AttrCauseSeq.Int64(c.seq))
	}
	return append(a, AttrCauseOffset.Int64(c.off))
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// matchWants links the records waiting for d to the span that produced d.
func (tt *taskTracer) matchWants(d *protocol.Delivery, psc trace.SpanContext) {
	if ws, ok := tt.wants[d.Coordinate]; ok {
		delete(tt.wants, d.Coordinate)
		for _, w := range ws {
			tt.link(w, psc)
		}
	}
	if !d.Stamp.Tagged || len(tt.seqWants) == 0 {
		return
	}
	k := seqWantKey{d.Channel, d.Stamp.Sender}
	ws := tt.seqWants[k]
	j := 0
	for _, w := range ws {
		if w.seq <= d.Stamp.Seq {
			tt.link(w.waiter, psc)
			continue
		}
		ws[j] = w
		j++
	}
	if j == 0 {
		delete(tt.seqWants, k)
	} else if j < len(ws) {
		tt.seqWants[k] = ws[:j]
	}
}

func (tt *taskTracer) link(waiter headers.Coordinate, cause trace.SpanContext) {
	e := tt.held[waiter]
	if e == nil || !cause.IsValid() || len(e.links) == maxHoldCauses {
		return
	}
	for _, l := range e.links {
		if l.SpanContext.Equal(cause) {
			return
		}
	}
	e.links = append(e.links, trace.Link{SpanContext: cause, Attributes: []attribute.KeyValue{AttrLinkRole.String("cause")}})
}

// processed is called when a delivery's handler and emissions returned.
func (tt *taskTracer) processed() {
	if k := len(tt.open); k > 0 && tt.open[k-1].end.IsZero() {
		tt.open[k-1].end = time.Now()
	}
	tt.cur = nil
}

// stepEnded ends the step's spans with its outcome. A committed step's
// holds are over; an aborted step's records are delivered again by the
// step that redoes it, whose hold spans start at the same first fetch.
func (tt *taskTracer) stepEnded(committed bool) {
	outcome := AttrStepOutcome.String("aborted")
	if committed {
		outcome = AttrStepOutcome.String("committed")
	}
	now := time.Now()
	for _, o := range tt.open {
		o.span.SetAttributes(outcome)
		if !committed {
			o.span.SetStatus(codes.Error, "step aborted: redone from committed state")
		}
		end := o.end
		if end.IsZero() {
			end = now
		}
		o.span.End(trace.WithTimestamp(end))
	}
	clear(tt.open)
	tt.open = tt.open[:0]
	for _, c := range tt.delivered {
		if e := tt.held[c]; e != nil {
			if committed {
				delete(tt.held, c)
			} else {
				e.delivered = false
			}
		}
	}
	tt.delivered = tt.delivered[:0]
	tt.cur = nil
	tt.fetching.active = false
}

// headerCarrier reads trace context from a record's headers.
type headerCarrier []headers.Header

func (c headerCarrier) Get(key string) string {
	for _, h := range c {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

func (c headerCarrier) Set(string, string) {} // read only

func (c headerCarrier) Keys() []string {
	ks := make([]string, len(c))
	for i, h := range c {
		ks[i] = h.Key
	}
	return ks
}
