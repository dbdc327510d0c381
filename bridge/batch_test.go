package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/stage"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

// TestPerMessageFallbackWhenConfigured: on a stream that does not allow
// atomic publish, AtomicBatchOrPerMessage publishes record by record and
// forwards everything; AtomicBatch refuses it (TestStartupRefusals).
func TestPerMessageFallbackWhenConfigured(t *testing.T) {
	e := newEnv(t, 1, "events")
	e.createStream(jetstream.StreamConfig{Name: "PLAIN", Subjects: []string{"plain.>"}, Duplicates: 5 * time.Minute})
	want := produceN(e, "events", 1, 0, 20)
	cfg := e.config("events")
	cfg.Stream, cfg.Publish = "PLAIN", AtomicBatchOrPerMessage
	cfg.Subject, _ = Template("plain.{topic}")
	var logs logBuffer
	cfg.Logger = logs.logger()
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := e.start(b)
	waitFor(t, 30*time.Second, "every record in the stream", func() bool { return len(e.streamMsgs("PLAIN")) >= len(want) })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnceInOrder(t, e.streamMsgs("PLAIN"), want)
	if b.pub.atomicMode() != nil {
		t.Fatal("publisher in batch mode on a stream without atomic publish")
	}
	if !bytes.Contains([]byte(logs.String()), []byte("does not allow atomic publish")) {
		t.Fatalf("no warning about the fallback in the log:\n%s", logs.String())
	}
}

// cutProxy forwards TCP between the bridge and NATS. Armed, it cuts the
// connection at the third message of the first atomic batch that has
// one (after skip such batches): the batch's first two messages reach
// NATS, the third (the commit, or a message before it) and everything
// after do not. It then refuses connections until reopened.
type cutProxy struct {
	t      *testing.T
	ln     net.Listener
	target string

	marker []byte // what marks a batch's third message

	mu     sync.Mutex
	armed  bool
	skip   int  // third messages to let through before the cut
	closed bool // refusing connections
	cut    chan struct{}
	conns  []net.Conn
}

// thirdMarker is the header of a batch's third message.
var thirdMarker = []byte("Nats-Batch-Sequence: 3\r\n")

// fastThirdMarker ends the reply subject, in its HPUB line, of a fast
// batch's third message (batch sequence 3, an append).
var fastThirdMarker = []byte("." + fastGapFail + ".3.1" + fastSuffix + " ")

func newCutProxy(t *testing.T, target string) *cutProxy {
	return newCutProxyAt(t, target, thirdMarker)
}

// newCutProxyAt is newCutProxy cutting at the message marker marks.
func newCutProxyAt(t *testing.T, target string, marker []byte) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{t: t, ln: ln, target: target, marker: marker, armed: true, cut: make(chan struct{})}
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.Close()
		}
	})
	return p
}

func (p *cutProxy) url() string { return "nats://" + p.ln.Addr().String() }

// waitCut waits for the cut, failing the test when what, the batch it
// waits for, has no third message within 30 seconds.
func (p *cutProxy) waitCut(what string) {
	p.t.Helper()
	select {
	case <-p.cut:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("no third message of %s went through the proxy", what)
	}
}

func (p *cutProxy) reopen() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = false
}

func (p *cutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.closed
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { io.Copy(c, s); c.Close(); s.Close() }()
		go p.upstream(c, s)
	}
}

// upstream copies client to server, watching for a batch's third
// message.
func (p *cutProxy) upstream(c, s net.Conn) {
	defer c.Close()
	defer s.Close()
	var seen []byte // the tail of what went through, to find a split marker
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			p.mu.Lock()
			armed := p.armed
			p.mu.Unlock()
			if armed {
				all := append(seen[:len(seen):len(seen)], chunk...)
				// Only a marker that ends in this chunk is new.
				from := max(0, len(seen)-len(p.marker)+1)
				at := -1
				for at < 0 {
					i := bytes.Index(all[from:], p.marker)
					if i < 0 {
						break
					}
					p.mu.Lock()
					if p.skip == 0 {
						at = from + i
					} else {
						p.skip--
						from += i + len(p.marker)
					}
					p.mu.Unlock()
				}
				if at >= 0 {
					// Forward what precedes the third message's HPUB line
					// (some of it may have gone through already).
					keep := bytes.LastIndex(all[:at], []byte("HPUB ")) - len(seen)
					if keep > 0 {
						s.Write(chunk[:keep])
					}
					p.mu.Lock()
					p.armed, p.closed = false, true
					close(p.cut)
					p.mu.Unlock()
					return
				}
				seen = all[max(0, len(all)-4096):]
			}
			if _, err := s.Write(chunk); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// TestConnectionBreaksMidBatch: the connection to NATS breaks after part
// of a step's batch reached the stream (its first two messages) and
// before its commit. The stream
// holds nothing of that batch; the bridge retries the step once NATS is
// reachable again and the stream ends with every record once, in order.
func TestConnectionBreaksMidBatch(t *testing.T) {
	e := newEnv(t, 1, "events")
	want := produceN(e, "events", 1, 0, 40)
	proxy := newCutProxy(t, "127.0.0.1:"+strconv.Itoa(e.natsPort))
	cfg := e.config("events")
	cfg.NATSURL = proxy.url()
	cfg.MaxPollRecords = 100
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := e.start(b)
	proxy.waitCut("a batch")
	// Steps that committed before the cut published nothing (the stream
	// is still empty below): the step that builds a restored task's node
	// commits on its own, before any record is fed.
	atCut := b.CommittedSteps()
	// The stream abandons the batch; nothing of it is stored. Give a
	// wrongly committed batch time to show.
	time.Sleep(300 * time.Millisecond)
	if got := e.streamMsgs(testStream); len(got) != 0 {
		t.Fatalf("the stream stored %d messages of a batch whose commit never arrived (first %s)", len(got), got[0].coord)
	}
	if n := b.CommittedSteps() - atCut; n != 0 {
		t.Fatalf("%d steps committed without their batch", n)
	}
	t.Logf("%d steps committed before the cut", atCut)
	proxy.reopen()
	waitFor(t, 30*time.Second, "every record in the stream", func() bool { return len(e.streamMsgs(testStream)) >= len(want) })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnceInOrder(t, e.streamMsgs(testStream), want)
	if n := testutil.ToFloat64(b.pub.m.retries); n == 0 {
		t.Fatal("no step was retried")
	}
	if n := testutil.ToFloat64(b.pub.m.duplicates); n != 0 {
		t.Fatalf("%v duplicates: the redone step found records of the broken batch stored", n)
	}
	if b.pub.atomicMode() == nil {
		t.Fatal("the test did not run in batch mode")
	}
}

// TestLargeStepSplitsIntoBatches: a step spanning many polls delivers more
// records than an atomic batch may hold; it is published as consecutive
// batches of at most maxBatch, and the stream holds every record once, in
// delivered order.
func TestLargeStepSplitsIntoBatches(t *testing.T) {
	e := newEnv(t, 1, "events")
	want := produceN(e, "events", 1, 0, 2*maxBatch+500)
	cfg := e.config("events")
	// Polls of 100 records; the step ends at its budget or when nothing
	// more is fetched, not at its interval.
	cfg.MaxPollRecords, cfg.MaxStepRecords, cfg.CommitInterval = 100, 3*maxBatch, time.Minute
	b, h := newHooked(t, cfg)
	r := e.start(b)
	waitFor(t, 60*time.Second, "every record in the stream", func() bool { return len(e.streamMsgs(testStream)) >= len(want) })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	got := e.streamMsgs(testStream)
	checkExactlyOnceInOrder(t, got, want)
	if h.largestStep <= maxBatch {
		t.Fatalf("largest step %d records, not above %d: the test proves nothing", h.largestStep, maxBatch)
	}
	// One latency observation per batch: a step of more than maxBatch
	// records needs more than one.
	var m dto.Metric
	if err := b.pub.m.latency.Write(&m); err != nil {
		t.Fatal(err)
	}
	if n := m.GetHistogram().GetSampleCount(); n < 3 {
		t.Fatalf("%d batches for %d records", n, len(want))
	}
	t.Logf("largest step %d records", h.largestStep)
}

// TestRedoOrderAgainstJetStream: steps published to a real stream and
// redone, in both publishing modes. A redo that delivers two concurrent
// records in the other order finds both stored and raises no alarm; a
// redo that stores a cause the first attempt lost, after the effect the
// first attempt stored, raises it.
func TestRedoOrderAgainstJetStream(t *testing.T) {
	a := headers.Channel{Topic: headers.TopicID{1}, Partition: 0}
	b := headers.Channel{Topic: headers.TopicID{2}, Partition: 0}
	msg := func(topic string, ch headers.Channel, off int64, claims map[headers.Channel]int64) *stage.Message[[]byte, []byte] {
		r := stampedRecord(t, ch, off, claims, headers.SenderID{}, 0)
		return &stage.Message[[]byte, []byte]{Topic: topic, Partition: 0, Offset: off, Coordinate: r.coord,
			Headers: r.headers, Key: []byte("k"), Value: []byte(topic)}
	}
	for _, mode := range []PublishMode{AtomicBatch, PerMessage} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t, 1, "a", "b")
			cfg := e.config("a", "b").SinkConfig.withDefaults()
			cfg.Publish = mode
			p, ctx := openPublisher(t, cfg)
			step := func(ms ...*stage.Message[[]byte, []byte]) {
				t.Helper()
				p.Begin(ctx)
				for _, m := range ms {
					if err := p.publish(m); err != nil {
						t.Fatal(err)
					}
				}
				if err := p.Settle(ctx); err != nil {
					t.Fatal(err)
				}
			}
			b302 := msg("b", b, 302, nil)
			a612 := msg("a", a, 612, map[headers.Channel]int64{b: 301, a: 602}) // concurrent with b302
			step(b302, a612)
			step(a612, b302) // the redo, in the other valid order
			if v := testutil.ToFloat64(p.m.orderViolations); v != 0 {
				t.Fatalf("%v order violations for concurrent records redone in another order", v)
			}
			if d := testutil.ToFloat64(p.m.duplicates); d != 2 {
				t.Fatalf("%v duplicates, want the redo's 2", d)
			}
			effect := msg("a", a, 700, map[headers.Channel]int64{b: 400})
			step(effect) // an attempt that stored the effect and lost its cause
			step(msg("b", b, 400, nil), effect)
			if v := testutil.ToFloat64(p.m.orderViolations); v != 1 {
				t.Fatalf("%v order violations for a cause stored after its effect, want 1", v)
			}
			if got := len(e.streamMsgs(testStream)); got != 4 {
				t.Fatalf("stream holds %d messages, want 4", got)
			}
		})
	}
}

// TestConnectionBreaksInALaterBatch: a step of more records than one
// batch holds streams its batches one after the other; the connection
// breaks in the middle of its second batch, after the first was
// acknowledged. The stream holds the first batch and nothing of the
// second, the step is redone (finding the first batch stored) and the
// stream ends with every record once, in delivered order across subjects.
func TestConnectionBreaksInALaterBatch(t *testing.T) {
	e := newEnv(t, 1, "events")
	want := produceN(e, "events", 1, 0, maxBatch+500)
	proxy := newCutProxy(t, "127.0.0.1:"+strconv.Itoa(e.natsPort))
	proxy.skip = 1
	cfg := e.config("events")
	cfg.NATSURL = proxy.url()
	cfg.MaxPollRecords, cfg.MaxStepRecords, cfg.CommitInterval = 100, 2*maxBatch, time.Minute
	cfg.Subject, _ = Template("kafka.{topic}.{key}") // a subject per record
	b, h := newHooked(t, cfg)
	stored := cutAndRedo(t, e, b, proxy, "a second batch", "the first batch", want)
	if h.largestStep <= maxBatch {
		t.Fatalf("largest step %d records, not above %d: the test proves nothing", h.largestStep, maxBatch)
	}
	if d := testutil.ToFloat64(b.pub.m.duplicates); d != float64(len(stored)) {
		t.Fatalf("%v duplicates, want the %d records the redo found stored", d, len(stored))
	}
	t.Logf("%d records stored before the cut", len(stored))
}

// TestAbandonedBatchIsDroppedAtOnce: a step that streamed part of a batch
// and ended without Settle (its Kafka side failed) leaves a batch the
// stream stages; the next Begin makes the stream drop it at once, not at
// its timeout (10 seconds), and nothing of it is stored.
func TestAbandonedBatchIsDroppedAtOnce(t *testing.T) {
	e := newEnv(t, 1, "a")
	p, ctx := openPublisher(t, e.config("a").SinkConfig.withDefaults())
	abandoned := make(chan string, 4)
	sub, err := p.nc.Subscribe("$JS.EVENT.ADVISORY.STREAM.BATCH_ABANDONED."+testStream, func(m *nats.Msg) {
		var adv struct {
			Batch  string `json:"batch"`
			Reason string `json:"reason"`
		}
		if err := json.Unmarshal(m.Data, &adv); err != nil {
			t.Error(err)
		}
		abandoned <- adv.Batch + " " + adv.Reason
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := p.nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ch := headers.Channel{Topic: headers.TopicID{1}, Partition: 0}
	p.Begin(ctx)
	for off := range int64(5) {
		r := stampedRecord(t, ch, off, nil, headers.SenderID{}, 0)
		m := &stage.Message[[]byte, []byte]{Topic: "a", Partition: 0, Offset: off, Coordinate: r.coord, Headers: r.headers, Key: []byte("k"), Value: []byte("v")}
		if err := p.publish(m); err != nil {
			t.Fatal(err)
		}
	}
	if p.atomicMode().staging == nil || p.atomicMode().staging.sent != 4 {
		t.Fatalf("open batch %+v, want 4 messages sent and the fifth held", p.atomicMode().staging)
	}
	id := p.atomicMode().staging.id
	if err := p.nc.Flush(); err != nil { // the staged messages reach the stream first
		t.Fatal(err)
	}
	p.Begin(ctx) // the step ended without Settle
	select {
	case got := <-abandoned:
		if got != id+" incomplete" {
			t.Fatalf("abandoned %q, want %q", got, id+" incomplete")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream did not drop the abandoned batch within 5s")
	}
	if n := len(e.streamMsgs(testStream)); n != 0 {
		t.Fatalf("the stream stored %d messages of an abandoned batch", n)
	}
	if v := testutil.ToFloat64(p.m.inFlight); v != 0 {
		t.Fatalf("%v publishes in flight after the batch was dropped", v)
	}
}

// cutAndRedo runs b until proxy cuts its connection at the third message
// of batch what, and checks that the stream then holds a non-empty
// delivered-order prefix of want (storedWhat) and that no step committed
// since; it reopens the proxy and checks that the stream ends with every
// record of want once, in delivered order across subjects. It returns
// what the stream held at the cut.
func cutAndRedo(t *testing.T, e *env, b *Bridge, proxy *cutProxy, what, storedWhat string, want []string) []stored {
	t.Helper()
	r := e.start(b)
	proxy.waitCut(what)
	atCut := b.CommittedSteps()
	time.Sleep(300 * time.Millisecond) // time for a wrongly committed batch, or messages after the cut, to show
	stored := e.streamMsgs(testStream)
	if len(stored) == 0 {
		t.Fatalf("the stream holds nothing at the cut, want %s", storedWhat)
	}
	checkDeliveredPrefix(t, stored, want)
	if n := b.CommittedSteps() - atCut; n != 0 {
		t.Fatalf("%d steps committed without their batches", n)
	}
	proxy.reopen()
	waitFor(t, 30*time.Second, "every record in the stream", func() bool { return len(e.streamMsgs(testStream)) >= len(want) })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	got := e.streamMsgs(testStream)
	checkExactlyOnceInOrder(t, got, want)
	checkDeliveredPrefix(t, got, want)
	return stored
}

// checkDeliveredPrefix checks that the stream holds the first len(got)
// records of want, in want's order across subjects.
func checkDeliveredPrefix(t *testing.T, got []stored, want []string) {
	t.Helper()
	if len(got) > len(want) {
		t.Fatalf("the stream holds %d messages, more than the %d records", len(got), len(want))
	}
	for i, m := range got {
		if m.coord != want[i] {
			t.Fatalf("message %d is %s, want %s: not the delivered order across subjects", i, m.coord, want[i])
		}
	}
}

// openPublisher opens a publisher over cfg (defaults applied) outside a
// stage, with a context of 30 seconds; both end with the test.
func openPublisher(t *testing.T, cfg SinkConfig) (*publisher, context.Context) {
	t.Helper()
	p := newPublisher(cfg, newMetrics(testStream))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	if ok, err := p.open(ctx); !ok || err != nil {
		t.Fatalf("open = %v, %v", ok, err)
	}
	t.Cleanup(p.close)
	return p, ctx
}

// TestLightLoadCommitsAtOnce: with a commit interval far past the test's
// timeout, a step that finds nothing more to fetch commits at once: a lone
// record reaches the stream and its step commits.
func TestLightLoadCommitsAtOnce(t *testing.T) {
	e := newEnv(t, 1, "events")
	cfg := e.config("events")
	cfg.CommitInterval = time.Hour
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := e.start(b)
	waitFor(t, 30*time.Second, "the bridge to be ready", b.Ready)
	atStart := b.CommittedSteps()
	want := produceN(e, "events", 1, 0, 1)
	waitFor(t, 30*time.Second, "the record in the stream", func() bool { return len(e.streamMsgs(testStream)) == 1 })
	waitFor(t, 30*time.Second, "its step to commit", func() bool { return b.CommittedSteps() > atStart })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnceInOrder(t, e.streamMsgs(testStream), want)
}
