package view_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/view"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestHandler(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t, 1)
	v := f.startView(t)
	h, err := view.Handler(v, view.HandlerOptions[string]{MaxWait: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path, tok string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		if tok != "" {
			req.Header.Set(view.TokenHeader, tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if err := v.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if code, body := get("/readyz", ""); code != 200 {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	clk := clock.New(f.c.Admin())
	defer clk.Close()
	rec := &kgo.Record{Topic: "orders", Key: []byte("a"), Value: []byte("12")}
	if err := clk.Stamp(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Client().ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := clk.RecordProduced(rec); err != nil {
		t.Fatal(err)
	}
	tok := view.TokenOf(clk.Snapshot()).String()

	// The stage is not running: the token read times out naming the record.
	if code, body := get("/state/a", tok); code != http.StatusGatewayTimeout || !strings.Contains(body, "offset 0") {
		t.Fatalf("token read before the stage runs = %d %q; want 504 naming offset 0", code, body)
	}
	if code, body := get("/state/a", "pt1.!!"); code != http.StatusBadRequest || !strings.Contains(body, "invalid causal token") {
		t.Fatalf("bad token = %d %q; want 400", code, body)
	}
	if code, _ := get("/state/a", ""); code != http.StatusNotFound {
		t.Fatalf("read without token before the stage runs = %d, want 404", code)
	}
	f.run(t)
	for {
		code, body := get("/state/a", tok)
		if code == http.StatusGatewayTimeout && ctx.Err() == nil {
			continue // the stage is still starting
		}
		if code != 200 || strings.TrimSpace(body) != "12" {
			t.Fatalf("token read = %d %q; want 200 12", code, body)
		}
		break
	}
	if code, body := get("/metrics", ""); code != 200 || !strings.Contains(body, "parsley_view_applied_offset") {
		t.Fatalf("/metrics = %d %q", code, body)
	}
}
