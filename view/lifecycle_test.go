package view_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/stage"
	"github.com/parsley-go/parsley/view"
)

func TestConfigIsValidated(t *testing.T) {
	good := view.Config{ApplicationID: "shop", Stage: "orders", Brokers: []string{"k:9092"}}
	tests := []struct {
		name string
		edit func(*view.Config)
		want string // in the error; empty for a valid config
	}{
		{"valid", func(*view.Config) {}, ""},
		{"valid with partitions", func(c *view.Config) { c.Partitions = []int32{0, 2} }, ""},
		{"no application", func(c *view.Config) { c.ApplicationID = "" }, "ApplicationID"},
		{"no stage", func(c *view.Config) { c.Stage = "" }, "Stage"},
		{"stage with a slash", func(c *view.Config) { c.Stage = "a/b" }, "Stage"},
		{"application dot-dot", func(c *view.Config) { c.ApplicationID = ".." }, "ApplicationID"},
		{"no brokers", func(c *view.Config) { c.Brokers = nil }, "no Brokers"},
		{"empty broker", func(c *view.Config) { c.Brokers = []string{"k:9092", " "} }, "Brokers[1]"},
		{"negative partition", func(c *view.Config) { c.Partitions = []int32{-1} }, "Partitions: -1"},
		{"partition twice", func(c *view.Config) { c.Partitions = []int32{3, 3} }, "Partitions: 3 appears twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.edit(&cfg)
			_, err := view.New(cfg, stage.String(), stage.Int64())
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("New refused a valid config: %v", err)
			case tt.want != "" && (!errors.Is(err, view.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("New = %v; want ErrInvalidConfig naming %q", err, tt.want)
			}
		})
	}
	if _, err := view.New[string, int64](good, nil, stage.Int64()); !errors.Is(err, view.ErrInvalidConfig) {
		t.Fatalf("New without a key codec: %v; want ErrInvalidConfig", err)
	}
}

// Before Run has loaded anything, Get says the view is not ready (with no
// partition to name yet) and a token read waits for Run, then says so in
// the documented *WaitError; the HTTP handler answers both with 503 and
// Retry-After. After Close, everything fails with ErrClosed at once.
func TestReadsBeforeRunAndAfterClose(t *testing.T) {
	f := newFixture(t, 2)
	v, err := view.New(view.Config{ApplicationID: f.app, Stage: stageName, Brokers: f.c.Addrs()}, stage.String(), stage.Int64())
	if err != nil {
		t.Fatal(err)
	}
	var nre *view.NotReadyError
	if _, _, err := v.Get("a"); !errors.As(err, &nre) || !errors.Is(err, view.ErrNotReady) || nre.Partition != -1 {
		t.Fatalf("Get before Run: %v; want a *NotReadyError with no partition yet", err)
	}
	tok := view.TokenAt(headers.Coordinate{Channel: headers.Channel{Topic: headers.TopicID{1}}, Offset: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, _, err = v.GetAfter(ctx, tok, "a")
	cancel()
	var we *view.WaitError
	if !errors.As(err, &we) || !we.NotRunning || we.Stopped != nil || !errors.Is(err, view.ErrNotYet) ||
		!errors.Is(err, view.ErrNotRunning) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetAfter before Run: %v; want a *WaitError saying Run has not started", err)
	}
	if !strings.Contains(err.Error(), "Run has not started") {
		t.Fatalf("GetAfter before Run: %q does not say Run has not started", err)
	}

	h, err := view.Handler(v, view.HandlerOptions[string]{MaxWait: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(tok string) (int, string, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+"/state/a", nil)
		if tok != "" {
			req.Header.Set(view.TokenHeader, tok)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Retry-After"), string(b)
	}
	for _, tk := range []string{"", tok.String()} {
		if code, retry, body := get(tk); code != http.StatusServiceUnavailable || retry != view.RetryAfter {
			t.Fatalf("GET /state/a (token %q) before Run = %d, Retry-After %q, %q; want 503 with Retry-After", tk, code, retry, body)
		}
	}

	// A Run that returned: a token read reports what it returned.
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- v.Run(runCtx) }()
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	if err := v.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	wcancel()
	stop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v; want context.Canceled", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, _, err = v.GetAfter(ctx, tok, "a")
	cancel()
	if !errors.As(err, &we) || !we.NotRunning || !errors.Is(we.Stopped, context.Canceled) || we.Partition < 0 {
		t.Fatalf("GetAfter after Run returned: %v; want a *WaitError naming Run's error and the key's partition", err)
	}
	if _, ok, err := v.Get("a"); err != nil || ok {
		t.Fatalf("Get after Run returned: %v, %v; want the replica's answer (no state)", ok, err)
	}

	// A token read waiting when Close is called ends at once.
	waiting := make(chan error, 1)
	go func() {
		_, _, err := v.GetAfter(context.Background(), tok, "a")
		waiting <- err
	}()
	time.Sleep(50 * time.Millisecond) // let it wait
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waiting:
		if !errors.Is(err, view.ErrClosed) {
			t.Fatalf("a GetAfter waiting at Close: %v; want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a GetAfter waiting at Close did not return")
	}
	if _, _, err := v.Get("a"); !errors.Is(err, view.ErrClosed) {
		t.Fatalf("Get after Close: %v; want ErrClosed", err)
	}
	for _, err := range v.All() {
		if !errors.Is(err, view.ErrClosed) {
			t.Fatalf("All after Close: %v; want ErrClosed", err)
		}
	}
	if err := v.Run(context.Background()); !errors.Is(err, view.ErrClosed) {
		t.Fatalf("Run after Close: %v; want ErrClosed", err)
	}
	if err := v.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
	if code, retry, _ := get(""); code != http.StatusServiceUnavailable || retry == "" {
		t.Fatalf("GET /state/a after Close = %d, Retry-After %q; want 503", code, retry)
	}
}

// Close stops a running Run, which returns ErrClosed, and returns only
// once Run released what it held: another view can take its state file at
// once.
func TestCloseStopsRun(t *testing.T) {
	f := newFixture(t, 1)
	dir := t.TempDir()
	newView := func() *view.View[string, int64] {
		v, err := view.New(view.Config{ApplicationID: f.app, Stage: stageName, Brokers: f.c.Addrs(), StateDir: dir}, stage.String(), stage.Int64())
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	v := newView()
	done := make(chan error, 1)
	go func() { done <- v.Run(context.Background()) }()
	ctx := testCtx(t)
	if err := v.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	next := newView()
	defer next.Close()
	nextErr := make(chan error, 1)
	go func() { nextErr <- next.Run(ctx) }()
	for !next.Ready() {
		select {
		case err := <-nextErr:
			t.Fatalf("a view on the closed view's StateDir: Run = %v; Close returned before Run released its file", err)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	select {
	case err := <-done:
		if !errors.Is(err, view.ErrClosed) {
			t.Fatalf("Run after Close = %v; want ErrClosed", err)
		}
	case <-ctx.Done():
		t.Fatal("Run did not return after Close")
	}
	if err := v.WaitReady(ctx); !errors.Is(err, view.ErrClosed) {
		t.Fatalf("WaitReady after Close: %v; want ErrClosed", err)
	}
}

// Two views of one stage may share a StateDir when they replicate other
// partitions; the same partition's file is held by one Run at a time, and
// the other's Run fails at once naming it.
func TestSharedStateDir(t *testing.T) {
	f := newFixture(t, 2)
	dir := t.TempDir()
	ctx := testCtx(t)
	newView := func(parts ...int32) *view.View[string, int64] {
		v, err := view.New(view.Config{ApplicationID: f.app, Stage: stageName, Brokers: f.c.Addrs(), StateDir: dir, Partitions: parts}, stage.String(), stage.Int64())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { v.Close() })
		return v
	}
	first, second := newView(0), newView(1)
	for _, v := range []*view.View[string, int64]{first, second} {
		go v.Run(ctx)
		if err := v.WaitReady(ctx); err != nil {
			t.Fatal(err)
		}
	}
	same := newView(0)
	err := same.Run(ctx)
	if !errors.Is(err, view.ErrStateInUse) || !strings.Contains(err.Error(), stageName+"-view-0.db") {
		t.Fatalf("a second view of partition 0 on the same StateDir: Run = %v; want ErrStateInUse naming the file", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	go same.Run(ctx)
	if err := same.WaitReady(ctx); err != nil {
		t.Fatalf("once the first view closed, the other could not take its file: %v", err)
	}
}
