package bridge

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestTracingCarriesContextIntoNATS: with tracing on, each NATS message's
// traceparent names the bridge's process span of its record, in the trace
// of the record's upstream producer (whose own traceparent it replaces);
// off, the producer's traceparent is forwarded as any header is.
func TestTracingCarriesContextIntoNATS(t *testing.T) {
	for _, traced := range []bool{true, false} {
		t.Run(map[bool]string{true: "on", false: "off"}[traced], func(t *testing.T) {
			e := newEnv(t, 1, "events")
			rec0 := rec("events", 0, "k", "v")
			rec0.Headers = []kgo.RecordHeader{{Key: "other", Value: []byte("kept")}}
			spans := tracetest.NewSpanRecorder()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
			defer tp.Shutdown(context.Background())
			ctx, prod := tp.Tracer("test").Start(context.Background(), "produce", trace.WithSpanKind(trace.SpanKindProducer))
			propagation.TraceContext{}.Inject(ctx, kotel.NewRecordCarrier(rec0))
			prod.End()
			upstream := string(rec0.Headers[1].Value)
			e.produce(rec0)
			cfg := e.config("events")
			if traced {
				cfg.TracerProvider = tp
			}
			b, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			r := e.start(b)
			waitFor(t, 30*time.Second, "the message", func() bool { return len(e.streamMsgs(testStream)) >= 1 })
			if err := r.stop(); err != nil {
				t.Fatal(err)
			}
			h := e.streamMsgs(testStream)[0].header
			if h.Get("other") != "kept" || len(h.Values("traceparent")) != 1 {
				t.Fatalf("headers %v: want other kept and one traceparent", h)
			}
			got := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), natsCarrier(h)))
			if !traced {
				if h.Get("traceparent") != upstream {
					t.Errorf("traceparent %q, want the producer's %q forwarded", h.Get("traceparent"), upstream)
				}
				return
			}
			var process sdktrace.ReadOnlySpan
			for _, s := range spans.Ended() {
				if s.Name() == "events process" {
					process = s
				}
			}
			if process == nil {
				t.Fatal("no process span")
			}
			if got.SpanID() != process.SpanContext().SpanID() || got.TraceID() != prod.SpanContext().TraceID() {
				t.Errorf("NATS traceparent %v/%v, want the process span %v in the producer's trace %v",
					got.TraceID(), got.SpanID(), process.SpanContext().SpanID(), prod.SpanContext().TraceID())
			}
		})
	}
}
