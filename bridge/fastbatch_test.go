package bridge

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/stage"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// updateStream changes the env's stream's configuration.
func (e *env) updateStream(change func(*jetstream.StreamConfig)) {
	e.t.Helper()
	js, done := e.js()
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, testStream)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	cfg := info.Config
	change(&cfg)
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		e.t.Fatal(err)
	}
}

// allowFastBatch lets the env's stream take fast batches too.
func (e *env) allowFastBatch() {
	e.updateStream(func(c *jetstream.StreamConfig) { c.AllowBatchPublish = true })
}

// fastConfig is the env's bridge configuration in FastBatch mode over a
// stream that allows it.
func (e *env) fastConfig(topics ...string) Config {
	e.allowFastBatch()
	cfg := e.config(topics...)
	cfg.Publish = FastBatch
	return cfg
}

// fastStep publishes records of channel ch (one subject per offset, so
// that order across subjects is what is checked) as one step and returns
// Settle's error.
func fastStep(t *testing.T, p *publisher, ctx context.Context, ch headers.Channel, offsets ...int64) error {
	t.Helper()
	p.Begin(ctx)
	for _, off := range offsets {
		r := stampedRecord(t, ch, off, nil, headers.SenderID{}, 0)
		m := &stage.Message[[]byte, []byte]{Topic: "a", Partition: 0, Offset: off, Coordinate: r.coord, Headers: r.headers,
			Key: []byte("k" + r.coord.String()[len(r.coord.String())-1:]), Value: []byte("v")}
		if off >= 1000 {
			m.Value = make([]byte, 4096) // above the test stream's message size limit
		}
		if err := p.publish(m); err != nil {
			t.Fatal(err)
		}
	}
	return p.Settle(ctx)
}

// storedOffsets returns the offsets of channel-a records in the stream,
// in stream order, after a sentinel publish proves the stream processed
// everything sent before it.
func storedOffsets(t *testing.T, e *env) []string {
	t.Helper()
	js, done := e.js()
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.Publish(ctx, "kafka.sentinel", nil); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, m := range e.streamMsgs(testStream) {
		if m.subject != "kafka.sentinel" {
			out = append(out, m.id[strings.LastIndexByte(m.id, '@')+1:])
		}
	}
	return out
}

// openFastPublisher opens a FastBatch publisher on the env's stream, all
// records going to kafka.a.<key>.
func openFastPublisher(t *testing.T, e *env) (*publisher, context.Context) {
	t.Helper()
	e.allowFastBatch()
	cfg := e.config("a").SinkConfig.withDefaults()
	cfg.Publish = FastBatch
	cfg.Subject = func(_ string, _ int32, key []byte) (string, error) { return "kafka.a." + string(key), nil }
	p, ctx := openPublisher(t, cfg)
	if p.fastMode() == nil {
		t.Fatal("the publisher is not in FastBatch mode")
	}
	return p, ctx
}

// TestFastBatchRedoAbsorbsStoredRecords: a redone step finds records an
// earlier attempt stored, at its start, in its middle, and all of it.
// Every redo settles, the stream holds each record once, and a step found
// stored whole counts as duplicates.
func TestFastBatchRedoAbsorbsStoredRecords(t *testing.T) {
	e := newEnv(t, 1, "a")
	p, ctx := openFastPublisher(t, e)
	ch := headers.Channel{Topic: headers.TopicID{1}, Partition: 0}
	for _, step := range [][]int64{
		{0, 1, 2},          // stored whole
		{0, 1, 2},          // redone whole: every record a duplicate at a batch start
		{0, 1, 2, 3, 4, 5}, // a redo whose first three records are stored
		{7},                // an attempt that stored a record in the middle of the next one
		{6, 7, 8},
		{9},
	} {
		if err := fastStep(t, p, ctx, ch, step...); err != nil {
			t.Fatalf("step %v: %v", step, err)
		}
	}
	if got, want := strings.Join(storedOffsets(t, e), " "), "0 1 2 3 4 5 7 6 8 9"; got != want {
		t.Fatalf("stream holds offsets %s, want %s", got, want)
	}
	// The whole redo's 3; the stream absorbs a duplicate in a batch that
	// stores others without a word.
	if d := testutil.ToFloat64(p.m.duplicates); d != 3 {
		t.Fatalf("%v duplicates reported, want 3", d)
	}
	if v := testutil.ToFloat64(p.m.inFlight); v != 0 {
		t.Fatalf("%v publishes in flight after the steps settled", v)
	}
	if n := testutil.ToFloat64(p.m.published); n != 3+3+6+1+3+1 {
		t.Fatalf("%v publishes acknowledged, want 17", n)
	}
}

// TestFastBatchStopsAtAFailedRecord: a record the stream refuses (above
// its message size limit) in the middle of a step ends the fast batch
// there: the stream holds the records before it, a prefix in delivered
// order, nothing after it, and Settle fails naming the record.
func TestFastBatchStopsAtAFailedRecord(t *testing.T) {
	e := newEnv(t, 1, "a")
	e.updateStream(func(c *jetstream.StreamConfig) { c.MaxMsgSize = 2048 })
	p, pctx := openFastPublisher(t, e)
	ch := headers.Channel{Topic: headers.TopicID{1}, Partition: 0}
	err := fastStep(t, p, pctx, ch, 0, 1, 1002, 3, 4)
	if err == nil {
		t.Fatal("a step with a refused record settled")
	}
	if !strings.Contains(err.Error(), p.step[2].coord.String()) {
		t.Fatalf("Settle = %v, does not name the refused record %s", err, p.step[2].coord)
	}
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("Settle = %v, want the stream's error wrapped", err)
	}
	if got := strings.Join(storedOffsets(t, e), " "); got != "0 1" {
		t.Fatalf("stream holds offsets %q, want the prefix before the refused record, \"0 1\"", got)
	}
	if v := testutil.ToFloat64(p.m.inFlight); v != 0 {
		t.Fatalf("%v publishes in flight after the step failed", v)
	}
	// The publisher goes on: the next step publishes.
	if err := fastStep(t, p, pctx, ch, 5, 6); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(storedOffsets(t, e), " "); got != "0 1 5 6" {
		t.Fatalf("stream holds offsets %q, want \"0 1 5 6\"", got)
	}
}

// TestConnectionBreaksMidFastBatch: the connection to NATS breaks in the
// middle of a step's fast batch, after its first two messages went
// through. The stream holds those, a prefix of the step in delivered
// order across subjects (a subject per record), and no step commits; once
// NATS is reachable again the redo finds the prefix stored, completes the
// step, and the stream ends with every record once, in delivered order.
func TestConnectionBreaksMidFastBatch(t *testing.T) {
	e := newEnv(t, 1, "events")
	want := produceN(e, "events", 1, 0, 40)
	proxy := newCutProxyAt(t, "127.0.0.1:"+strconv.Itoa(e.natsPort), fastThirdMarker)
	cfg := e.fastConfig("events")
	cfg.NATSURL = proxy.url()
	cfg.MaxPollRecords = 100
	cfg.Subject, _ = Template("kafka.{topic}.{key}")
	b, h := newHooked(t, cfg)
	stored := cutAndRedo(t, e, b, proxy, "a fast batch", "the batch's first messages", want)
	if n := testutil.ToFloat64(b.pub.m.retries); n == 0 {
		t.Fatal("no step was retried")
	}
	if b.pub.fastMode() == nil {
		t.Fatal("the test did not run in FastBatch mode")
	}
	if h.largestStep < 3 {
		t.Fatalf("largest step %d records: no batch had a third message", h.largestStep)
	}
	t.Logf("%d records stored at the cut", len(stored))
}

// TestFastBatchAnswers feeds the publisher the answers a stream may give
// to a batch's first message, without a server: the opening
// acknowledgement opens the batch; a plain duplicate acknowledgement (what
// nats-server 2.15 answers to a duplicate first message that also
// commits) ends it with the record stored, at the stored sequence, so the
// next record opens a new batch; an error fails the step naming the
// record; answers to another batch are ignored.
func TestFastBatchAnswers(t *testing.T) {
	ch := headers.Channel{Topic: headers.TopicID{1}, Partition: 0}
	for _, tc := range []struct {
		name     string
		answers  []string // JSON answers to batch sequence 1, in order
		open     bool
		seq      uint64 // of the record afterwards
		dups     float64
		failWith string // in p.failed, "" for none
	}{
		{"opened", []string{`{"type":"ack","seq":0,"msgs":500}`}, true, 0, 0, ""},
		{"duplicate that ends the batch", []string{`{"stream":"EVENTS","seq":42,"duplicate": true,"batch":"B","count":1}`}, false, 42, 1, ""},
		{"error", []string{`{"stream":"EVENTS","error":{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}}`}, false, 0, 0, "message size exceeds maximum allowed"},
		{"acknowledged by another stream", []string{`{"stream":"OTHER","seq":7,"duplicate": true,"count":1}`}, false, 0, 0, `acknowledged by stream "OTHER"`},
		{"stale answer first", []string{"stale", `{"type":"ack","seq":0,"msgs":1}`}, true, 0, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPublisher(SinkConfig{Stream: testStream, AckTimeout: 2 * time.Second, Logger: testLogger()}, newMetrics(testStream))
			x := &fastBatches{p: p, fastInbox: "_INBOX.test", fastAnswers: make(chan *nats.Msg, 8)}
			p.mode = x
			r := stampedRecord(t, ch, 5, nil, headers.SenderID{}, 0)
			p.step = []storedRecord{r}
			b := &fastBatch{id: "B", reply: x.fastInbox + ".B.500.fail.", subject: "kafka.a", flow: fastFlow, sent: 1, opened: time.Now()}
			x.fast = b
			for _, a := range tc.answers {
				subj := b.reply + "1.0" + fastSuffix
				if a == "stale" {
					subj, a = x.fastInbox+".A.500.fail.1.0"+fastSuffix, `{"stream":"EVENTS","error":{"code":400,"description":"stale"}}`
				}
				x.fastAnswers <- &nats.Msg{Subject: subj, Data: []byte(a)}
			}
			x.awaitFirst(context.Background(), b)
			if got := x.fast != nil; got != tc.open {
				t.Fatalf("batch open: %v, want %v", got, tc.open)
			}
			if p.step[0].seq != tc.seq {
				t.Fatalf("record sequence %d, want %d", p.step[0].seq, tc.seq)
			}
			if d := testutil.ToFloat64(p.m.duplicates); d != tc.dups {
				t.Fatalf("%v duplicates, want %v", d, tc.dups)
			}
			switch {
			case tc.failWith == "" && p.failed != nil:
				t.Fatalf("failed: %v", p.failed)
			case tc.failWith != "" && (p.failed == nil || !strings.Contains(p.failed.Error(), tc.failWith) || !strings.Contains(p.failed.Error(), r.coord.String())):
				t.Fatalf("failed: %v, want an error naming %s and saying %q", p.failed, r.coord, tc.failWith)
			}
		})
	}
}

// TestFastBatchWaitsForFlowAcknowledgements: asked for an acknowledgement
// every 2 messages, the publisher may run 4 ahead and never more; a step
// of 300 records waits for the stream and still settles with every record
// stored once, in delivered order. How often it waits depends on how fast
// the server answers, so the test judges the lead, not the count.
func TestFastBatchWaitsForFlowAcknowledgements(t *testing.T) {
	e := newEnv(t, 1, "a")
	p, ctx := openFastPublisher(t, e)
	x := p.fastMode()
	x.fastFlow = 2
	ch := headers.Channel{Topic: headers.TopicID{1}, Partition: 0}
	var offsets []int64
	var want []string
	for off := range int64(300) {
		offsets = append(offsets, off)
		want = append(want, strconv.FormatInt(off, 10))
	}
	if err := fastStep(t, p, ctx, ch, offsets...); err != nil {
		t.Fatal(err)
	}
	if got := storedOffsets(t, e); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("stream holds offsets %v, want 0..299 in order", got)
	}
	if window := uint64(fastOutstanding * 2); x.fastMaxLead > window {
		t.Fatalf("sent %d messages beyond the acknowledged ones, window %d", x.fastMaxLead, window)
	}
	if x.fastStalls == 0 {
		t.Fatal("sending never waited for the stream's acknowledgements")
	}
	if v := testutil.ToFloat64(p.m.inFlight); v != 0 {
		t.Fatalf("%v publishes in flight after the step settled", v)
	}
	t.Logf("sending waited %d times", x.fastStalls)
}

// TestFastBatchEnd judges the acknowledgement that ends a batch of five
// records: it must come from the stream and count all five; a shorter
// count fails the step naming the first record not stored, and a batch
// acknowledged with stream sequence 0 stored none of its records, all
// duplicates.
func TestFastBatchEnd(t *testing.T) {
	ch := headers.Channel{Topic: headers.TopicID{1}, Partition: 0}
	for _, tc := range []struct {
		name      string
		end       fastAnswer
		failWith  string // "" for success
		published float64
		dups      float64
	}{
		{"all stored", fastAnswer{Stream: testStream, Seq: 17, Count: 5}, "", 5, 0},
		{"all duplicates", fastAnswer{Stream: testStream, Seq: 0, Count: 5}, "", 5, 5},
		{"ended early", fastAnswer{Stream: testStream, Seq: 9, Count: 3}, "after 3 of 5 records, at " + (headers.Coordinate{Channel: ch, Offset: 3}).String(), 0, 0},
		{"counted more", fastAnswer{Stream: testStream, Seq: 9, Count: 6}, "acknowledged 6 records, sent 5", 0, 0},
		{"another stream", fastAnswer{Stream: "OTHER", Seq: 9, Count: 5}, `acknowledged by stream "OTHER"`, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPublisher(SinkConfig{Stream: testStream, Logger: testLogger()}, newMetrics(testStream))
			x := &fastBatches{p: p}
			p.mode = x
			for off := range int64(5) {
				p.step = append(p.step, stampedRecord(t, ch, off, nil, headers.SenderID{}, 0))
			}
			end := tc.end
			b := &fastBatch{id: "B", sent: 5, end: &end, opened: time.Now()}
			x.fast = b
			x.endFast(b)
			switch {
			case x.fast != nil:
				t.Fatal("the batch is still open")
			case tc.failWith == "" && p.failed != nil:
				t.Fatalf("failed: %v", p.failed)
			case tc.failWith != "" && (p.failed == nil || !strings.Contains(p.failed.Error(), tc.failWith)):
				t.Fatalf("failed: %v, want %q", p.failed, tc.failWith)
			}
			if n := testutil.ToFloat64(p.m.published); n != tc.published {
				t.Fatalf("%v published, want %v", n, tc.published)
			}
			if d := testutil.ToFloat64(p.m.duplicates); d != tc.dups {
				t.Fatalf("%v duplicates, want %v", d, tc.dups)
			}
		})
	}
}
