package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/obsdemo"
	"github.com/twmb/franz-go/pkg/kfake"
)

// healthBound is how soon after the broker stops /readyz must fail: the
// probe interval the test sets (--refresh 300ms) plus the probe's own
// timeout (5s), with room for a loaded machine.
const healthBound = 12 * time.Second

func fetch(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestServeReportsALostBrokerAndRecovers stops the broker under a running
// `serve` and starts it again on the same port and data: /readyz fails
// within healthBound, the UI shows the banner and the up gauge drops;
// after the broker returns, everything recovers without a restart and a
// record produced then is ingested.
func TestServeReportsALostBrokerAndRecovers(t *testing.T) {
	ctx := context.Background()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	opts := []broker.Option{broker.FakeOpts(kfake.DataDir(t.TempDir()), kfake.Ports(port))}
	start := func() (*broker.Cluster, *obsdemo.Builder) {
		t.Helper()
		c, err := broker.Start(ctx, opts...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		b, err := obsdemo.NewBuilder(c)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		return c, b
	}
	c, b := start()
	if _, err := b.Clean(ctx, 2); err != nil {
		t.Fatal(err)
	}
	url := startServing(t, "serve", "--brokers", c.Addrs()[0], "--pattern", "^(orders|shipments)$", "--refresh", "300ms",
		"--db", filepath.Join(t.TempDir(), "obs.db"), "--listen", "127.0.0.1:0")
	ready := func() bool { code, _ := fetch(t, url+"readyz"); return code == 200 }
	gauge := func(v string) func() bool {
		return func() bool {
			_, body := fetch(t, url+"metrics")
			return strings.Contains(body, "parsley_observer_up "+v+"\n")
		}
	}
	waitUntil(t, 20*time.Second, "/readyz answers 200 with the broker up", ready)
	if !gauge("1")() {
		t.Fatal("up gauge is not 1 while ready")
	}
	if _, body := fetch(t, url); strings.Contains(body, `id="banner"`) {
		t.Fatal("banner shown while the cluster is readable")
	}

	b.Close()
	c.Close()
	stopped := time.Now()
	waitUntil(t, healthBound, "/readyz fails after the broker stops", func() bool { return !ready() })
	t.Logf("/readyz failed %v after the broker stopped", time.Since(stopped).Round(time.Millisecond))
	code, body := fetch(t, url+"readyz")
	if code != 503 || !strings.Contains(body, "cannot read the cluster") {
		t.Errorf("/readyz with the broker gone: %d %q", code, body)
	}
	if !gauge("0")() {
		t.Error("up gauge did not drop to 0")
	}
	if code, body := fetch(t, url); code != 200 || !strings.Contains(body, `id="banner"`) {
		t.Errorf("findings page with the broker gone: %d, banner shown: %v", code, strings.Contains(body, `id="banner"`))
	}
	if code, _ := fetch(t, url+"api/findings"); code != 200 {
		t.Errorf("/api/findings with the broker gone: %d, want 200 from the store", code)
	}
	if code, _ := fetch(t, url+"healthz"); code != 200 {
		t.Errorf("/healthz (liveness) with the broker gone: %d, want 200: the process is fine", code)
	}

	_, b = start()
	waitUntil(t, 30*time.Second, "/readyz recovers after the broker returns", ready)
	if !gauge("1")() {
		t.Error("up gauge did not return to 1")
	}
	if _, body := fetch(t, url); strings.Contains(body, `id="banner"`) {
		t.Error("banner still shown after recovery")
	}
	at, err := b.Stamped(ctx, "orders", 0, &headers.Stamp{})
	if err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 20*time.Second, "a record produced after recovery is ingested", func() bool {
		code, _ := fetch(t, url+"api/records/orders/0@"+strconv.FormatInt(at.Offset, 10))
		return code == 200
	})
}
