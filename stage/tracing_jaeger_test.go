package stage

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/testjaeger"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.18.0"
)

// TestJaegerShowsHold is the Jaeger tier (PARSLEY_JAEGER, docs/testing.md):
// the held-record pipeline exports over OTLP to a real Jaeger, and the
// trace read back from its query API (/api/traces) holds the hold span with
// its cause, a duration covering the real wait, and a reference to the
// cause's producing span. PARSLEY_JAEGER_SCREENSHOT, if set, is where a
// headless Chromium saves the trace page (docs/tracing.md).
func TestJaegerShowsHold(t *testing.T) {
	j := testjaeger.Start(t)
	ctx := context.Background()
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(j.OTLPHTTP), otlptracehttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("parsley-join"))))
	defer tp.Shutdown(ctx)
	const hold = 1500 * time.Millisecond
	run := heldScenario(t, tp, hold, nil)
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	qctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// The held record's trace: its producer, kotel's receive span, the
	// hold and process spans, the output's publish span.
	spans, err := j.Trace(qctx, run.effect.TraceID().String(), 5)
	if err != nil {
		t.Fatal(err)
	}
	var h *testjaeger.Span
	for i := range spans {
		if spans[i].OperationName == "y hold" {
			h = &spans[i]
		}
	}
	if h == nil {
		t.Fatalf("no y hold span in trace %s: %+v", run.effect.TraceID(), spans)
	}
	for k, want := range map[string]string{
		"parsley.hold.code": "vc-hold-not-fetched", "parsley.hold.claim": "offset",
		"parsley.hold.cause.topic": "x", "parsley.hold.cause.partition": "0", "parsley.hold.cause.offset": "0",
		"parsley.step.outcome": "committed",
	} {
		if got := h.Tag(k); got != want {
			t.Errorf("hold span tag %s = %q, want %q", k, got, want)
		}
	}
	// The hold covers the real wait: at least from when the test saw the
	// record held to when it sent the cause, and no longer than the run.
	d := time.Duration(h.Duration) * time.Microsecond
	if lo, hi := run.causeSent.Sub(run.heldSeen), run.done.Sub(run.started); d < lo || d > hi {
		t.Errorf("hold span lasts %v, want within [%v, %v]", d, lo, hi)
	}
	linked := false
	for _, r := range h.References {
		linked = linked || (r.RefType == "FOLLOWS_FROM" && r.TraceID == run.cause.TraceID().String() && r.SpanID == run.cause.SpanID().String())
	}
	if !linked {
		t.Errorf("hold span references %+v, want the cause's producing span %s/%s", h.References, run.cause.TraceID(), run.cause.SpanID())
	}
	if shot := os.Getenv("PARSLEY_JAEGER_SCREENSHOT"); shot != "" {
		screenshot(t, j.Query+"/trace/"+run.effect.TraceID().String(), shot)
	}
}

// screenshot saves url as a PNG with headless Chromium.
func screenshot(t *testing.T, url, path string) {
	cmd := exec.Command("chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--window-size=1600,900", "--virtual-time-budget=8000", "--screenshot="+path, url)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium: %v\n%s", err, out)
	}
}
