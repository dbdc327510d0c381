package bridge

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestForwardsEveryRecordWithItsHeaders: records of two partitions reach
// the stream once each, in offset order per partition, on their mapped
// subjects, with the message ID, coordinate, key and application headers.
func TestForwardsEveryRecordWithItsHeaders(t *testing.T) {
	e := newEnv(t, 2, "events")
	var want []string
	var recs []*kgo.Record
	for i := range 20 {
		p := int32(i % 2)
		r := rec("events", p, fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i))
		r.Headers = []kgo.RecordHeader{{Key: "trace", Value: []byte("t-1")}, {Key: "bin", Value: []byte{0, 0xff}}}
		recs = append(recs, r)
		want = append(want, fmt.Sprintf("events/%d@%d", p, i/2))
	}
	e.produce(recs...)
	reg := prometheus.NewRegistry()
	cfg := e.config("events")
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	reg.MustRegister(b.Collector())
	r := e.start(b)
	waitFor(t, 30*time.Second, "20 messages", func() bool { return len(e.streamMsgs(testStream)) >= 20 })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	got := e.streamMsgs(testStream)
	checkExactlyOnceInOrder(t, got, want)
	for _, m := range got {
		var p, off int
		if _, err := fmt.Sscanf(m.coord, "events/%d@%d", &p, &off); err != nil {
			t.Fatal(err)
		}
		if wantSubj := fmt.Sprintf("kafka.events.%d", p); m.subject != wantSubj {
			t.Errorf("%s on subject %q, want %q", m.coord, m.subject, wantSubj)
		}
		i := off*2 + p
		if m.data != fmt.Sprintf("v%d", i) {
			t.Errorf("%s data %q, want v%d", m.coord, m.data, i)
		}
		if k := m.header.Get(HeaderKey); k != base64.StdEncoding.EncodeToString(fmt.Appendf(nil, "k%d", i)) {
			t.Errorf("%s key header %q", m.coord, k)
		}
		if m.header.Get("Nats-Batch-Id") == "" {
			t.Errorf("%s was not published in an atomic batch: headers %v", m.coord, m.header)
		}
		if m.header.Get("trace") != "t-1" || m.header.Get("bin") != "AP8=" || m.header.Get(HeaderBase64Headers) != "bin" {
			t.Errorf("%s headers %v", m.coord, m.header)
		}
	}
	if n := testutil.ToFloat64(b.pub.m.published); n != 20 {
		t.Errorf("published metric %v, want 20", n)
	}
	if n := testutil.ToFloat64(b.pub.m.inFlight); n != 0 {
		t.Errorf("in-flight metric %v after stop, want 0", n)
	}
	if n, err := testutil.GatherAndCount(reg, "parsley_bridge_publish_seconds"); err != nil || n != 1 {
		t.Errorf("latency histogram not registered: %d, %v", n, err)
	}
}

// TestTriangleArrivesCausesFirst: a derived record, stamped as caused by a
// base record that still sits in an open transaction, is visible first.
// The bridge must hold it until the base commits, and the stream must
// hold the base before the derived record.
func TestTriangleArrivesCausesFirst(t *testing.T) {
	e := newEnv(t, 1, "base", "derived")
	cfg := e.config("base", "derived")
	cfg.MaxInFlight = 16
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := e.start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tp, err := e.kafka.NewClient(kgo.TransactionalID("base-writer"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	if err := tp.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	base := rec("base", 0, "o1", "base")
	if err := tp.ProduceSync(ctx, base).FirstErr(); err != nil {
		t.Fatal(err)
	}
	clk := clock.New(e.kafka.Admin())
	if err := clk.RecordProduced(base); err != nil {
		t.Fatal(err)
	}
	derived := rec("derived", 0, "o1", "derived")
	if err := clk.Stamp(ctx, derived); err != nil {
		t.Fatal(err)
	}
	e.produce(derived)

	waitFor(t, 20*time.Second, "the derived record to be held", func() bool {
		for _, ti := range b.Tasks() {
			if ti.Held > 0 {
				return true
			}
		}
		return false
	})
	if got := e.streamMsgs(testStream); len(got) != 0 {
		t.Fatalf("published %d messages while the cause was uncommitted (first %s)", len(got), got[0].coord)
	}
	if err := tp.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "both records", func() bool { return len(e.streamMsgs(testStream)) >= 2 })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	got := e.streamMsgs(testStream)
	checkExactlyOnceInOrder(t, got, []string{"base/0@0", "derived/0@0"})
	if got[0].coord != "base/0@0" || got[1].coord != "derived/0@0" {
		t.Fatalf("stream order %s, %s; want the base first", got[0].coord, got[1].coord)
	}
	// The stamp travels byte for byte.
	var hs []headers.Header
	for _, h := range derived.Headers {
		hs = append(hs, headers.Header(h))
	}
	for _, h := range hs {
		if v := got[1].header.Get(h.Key); v != base64.StdEncoding.EncodeToString(h.Value) {
			t.Errorf("stamp header %q = %q, want base64 of %x", h.Key, v, h.Value)
		}
	}
	if len(hs) == 0 {
		t.Fatal("the derived record carries no stamp; the test proves nothing")
	}
}

// TestPipeliningStaysBounded: with MaxInFlight 8 and one subject per key,
// publishes overlap, never more than 8 at once and never two on one
// subject, and the stream still holds each partition in offset order.
func TestPipeliningStaysBounded(t *testing.T) {
	e := newEnv(t, 1, "events")
	var recs []*kgo.Record
	var want []string
	for i := range 300 {
		recs = append(recs, rec("events", 0, fmt.Sprintf("k%d", i%20), fmt.Sprintf("v%d", i)))
		want = append(want, fmt.Sprintf("events/0@%d", i))
	}
	e.produce(recs...)
	cfg := e.config("events")
	cfg.Publish, cfg.MaxInFlight = PerMessage, 8
	cfg.Subject, _ = Template("kafka.{topic}.{key}")
	b, h := newHooked(t, cfg)
	r := e.start(b)
	waitFor(t, 30*time.Second, "300 messages", func() bool { return len(e.streamMsgs(testStream)) >= 300 })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnceInOrder(t, e.streamMsgs(testStream), want)
	if h.peak > 8 || h.peak < 2 {
		t.Fatalf("peak in flight %d, want 2..8", h.peak)
	}
	if h.peakSubj != 1 {
		t.Fatalf("peak in flight on one subject %d, want 1", h.peakSubj)
	}
	t.Logf("peak in flight %d", h.peak)
}

// TestIntrospection: a running bridge reports its tasks, is ready, serves
// /readyz, and its collector carries both the publisher's and the stage
// runtime's metrics. Once Run returned it is not ready: readiness is not
// latched.
func TestIntrospection(t *testing.T) {
	e := newEnv(t, 2, "events")
	want := produceN(e, "events", 2, 0, 10)
	b, err := New(e.config("events"))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(b.Collector())
	if b.Ready() || len(b.Tasks()) != 0 {
		t.Fatalf("before Run: ready %v, tasks %v", b.Ready(), b.Tasks())
	}
	r := e.start(b)
	waitFor(t, 30*time.Second, "the bridge to become ready", b.Ready)
	waitFor(t, 30*time.Second, "every record in the stream", func() bool { return len(e.streamMsgs(testStream)) >= len(want) })
	got := b.Tasks()
	if len(got) != 2 || got[0].Stage != "bridge" || got[0].Partition != 0 || got[1].Stage != "bridge" || got[1].Partition != 1 {
		t.Fatalf("Tasks() = %+v, want bridge partitions 0 and 1", got)
	}
	if h := b.ExplainHolds(); len(h) != 0 {
		t.Fatalf("ExplainHolds() = %+v with nothing held", h)
	}
	if code := probe(t, b, "/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz answered %d while ready", code)
	}
	for _, name := range []string{"parsley_bridge_published_total", "parsley_records_delivered_total"} {
		if n, err := testutil.GatherAndCount(reg, name); err != nil || n == 0 {
			t.Errorf("collector has no %s: %d, %v", name, n, err)
		}
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if b.Ready() {
		t.Fatal("Ready() after Run returned")
	}
	if code := probe(t, b, "/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz answered %d after Run returned", code)
	}
}

func probe(t *testing.T, b *Bridge, path string) int {
	t.Helper()
	w := httptest.NewRecorder()
	b.HealthHandler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
	return w.Code
}
