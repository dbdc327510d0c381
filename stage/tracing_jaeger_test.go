package stage

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/parsley-go/parsley/internal/rig/jaegertest"
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
	j := jaegertest.Start(t)
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
	var h *jaegertest.Span
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

// screenshot saves the trace page at url as a PNG with headless Chromium,
// the hold span's details (tags and references) opened.
func screenshot(t *testing.T, url, path string) {
	exe, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	actx, cancel := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.NoFirstRun, chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1600, 1100))
	defer cancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancel = context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	const open = `(() => {
		const row = [...document.querySelectorAll('.span-name')].find(e => e.textContent.includes('y hold'));
		if (!row) return false;
		row.click();
		return true;
	})()`
	const expand = `(() => {
		for (const h of document.querySelectorAll('.AccordianKeyValues--header, .AccordianReferences--header')) {
			if (/Tags|Attributes|References/.test(h.textContent)) h.click();
		}
		return true;
	})()`
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitReady(chromedp.CSS(".span-name"))); err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if found, err := chromedp.Run(ctx, chromedp.Evaluate[bool](open)); err != nil || !found {
		t.Fatalf("screenshot: no y hold row (%v)", err)
	}
	if err := chromedp.Do(ctx, chromedp.Sleep(500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expand)); err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.Sleep(500*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
}
