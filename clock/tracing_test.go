package clock_test

import (
	"context"
	"testing"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kotel"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestStampBesideKotel: a clock-stamped producer traced by kotel (#36)
// sends records carrying both the stamp and kotel's traceparent; the stamp
// reads back intact, the traceparent names kotel's publish span, and a
// record that already carries a traceparent when stamped (a forwarded one)
// is stamped all the same: trace context is not a reserved header.
func TestStampBesideKotel(t *testing.T) {
	c := cluster(t, broker.Topic{Name: "events"})
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(context.Background())
	k := kotel.NewKotel(kotel.WithTracer(kotel.NewTracer(kotel.TracerProvider(tp), kotel.TracerPropagator(propagation.TraceContext{}))))
	cl, err := c.NewClient(kgo.WithHooks(k.Hooks()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	clk := clock.New(c.Admin())
	ctx := testCtx(t)
	for i, forwarded := range []bool{false, true} {
		rec := &kgo.Record{Topic: "events", Value: []byte("v")}
		if forwarded {
			rec.Headers = []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}}
		}
		if err := clk.Stamp(ctx, rec); err != nil {
			t.Fatalf("record %d: stamp beside a traceparent: %v", i, err)
		}
		res := cl.ProduceSync(ctx, rec)
		if err := res.FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := clk.RecordProduced(res[0].Record); err != nil {
			t.Fatal(err)
		}
	}
	got := consume(t, c, "events", 0, 2)
	ended := spans.Ended()
	for i, r := range got {
		var s headers.Stamp
		if err := headers.ReadStamp(&s, r.Headers); err != nil {
			t.Errorf("record %d: stamp: %v", i, err)
		}
		n := 0
		for _, h := range r.Headers {
			if h.Key == "traceparent" {
				n++
			}
		}
		sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), kotel.NewRecordCarrier(r)))
		if n != 1 || i >= len(ended) || sc.SpanID() != ended[i].SpanContext().SpanID() || ended[i].Name() != "events publish" {
			t.Errorf("record %d: %d traceparent headers naming %v; want one naming its publish span", i, n, sc.SpanID())
		}
	}
	if s := got[1]; s.Offset != 1 {
		t.Fatalf("offsets: %d", s.Offset)
	}
	var s headers.Stamp
	if err := headers.ReadStamp(&s, got[1].Headers); err != nil || s.Clock.NumOffsets() == 0 {
		t.Errorf("second record claims %d causes (%v), want the first", s.Clock.NumOffsets(), err)
	}
}
