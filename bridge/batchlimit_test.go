package bridge

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/stage"
	dto "github.com/prometheus/client_model/go"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// batchStep publishes n records of topic "a" partition 0 from offset from
// through p as one step and returns Settle's error. The records at offsets
// oversized carry a 4 KiB value.
func batchStep(t *testing.T, p *publisher, ctx context.Context, from, n int, oversized ...int64) error {
	t.Helper()
	ch := headers.Channel{Topic: headers.TopicID{1}, Partition: 0}
	p.Begin(ctx)
	for off := int64(from); off < int64(from+n); off++ {
		r := stampedRecord(t, ch, off, nil, headers.SenderID{}, 0)
		m := &stage.Message[[]byte, []byte]{Topic: "a", Partition: 0, Offset: off, Coordinate: r.coord, Headers: r.headers, Key: []byte("k"), Value: []byte("v")}
		if slices.Contains(oversized, off) {
			m.Value = make([]byte, 4096)
		}
		if err := p.publish(m); err != nil {
			return err
		}
	}
	return p.Settle(ctx)
}

// committedBatches returns how many batches p committed: one latency
// observation each.
func committedBatches(t *testing.T, p *publisher) uint64 {
	t.Helper()
	var m dto.Metric
	if err := p.m.latency.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

func coords(topic string, from, n int) []string {
	var out []string
	for off := from; off < from+n; off++ {
		out = append(out, fmt.Sprintf("%s/0@%d", topic, off))
	}
	return out
}

// restartNATSWithBatchLimit restarts the env's server over the same store
// with max_batch_size limit.
func (e *env) restartNATSWithBatchLimit(limit int) {
	e.t.Helper()
	e.stopNATS()
	e.natsLimits.MaxBatchSize = limit
	e.startNATS()
}

// TestBatchLimitBoundary: a step of exactly the server's batch limit is one
// atomic batch, one more record makes two, and the publisher learns the
// limit from the server: JetStream's default (1,000) and a server
// configured lower (max_batch_size 10).
func TestBatchLimitBoundary(t *testing.T) {
	for _, tc := range []struct {
		name        string
		serverLimit int // 0: the server's default
		limit       int
	}{
		{"default", 0, maxBatch},
		{"max_batch_size 10", 10, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1, "a")
			if tc.serverLimit > 0 {
				e.restartNATSWithBatchLimit(tc.serverLimit)
			}
			p, ctx := openPublisher(t, e.config("a").SinkConfig.withDefaults())
			var want []string
			for _, s := range []struct{ records, batches int }{
				{tc.limit, 1},
				{tc.limit + 1, 2},
				{2*tc.limit + 1, 3},
			} {
				before := committedBatches(t, p)
				if err := batchStep(t, p, ctx, len(want), s.records); err != nil {
					t.Fatalf("step of %d records: %v", s.records, err)
				}
				want = append(want, coords("a", len(want), s.records)...)
				if got := committedBatches(t, p) - before; got != uint64(s.batches) {
					t.Fatalf("a step of %d records at limit %d committed %d batches, want %d", s.records, tc.limit, got, s.batches)
				}
			}
			if got := p.atomicMode().limit; got != tc.limit {
				t.Fatalf("learned limit %d, want %d", got, tc.limit)
			}
			got := e.streamMsgs(testStream)
			checkExactlyOnceInOrder(t, got, want)
			checkDeliveredPrefix(t, got, want)
		})
	}
}

// TestBatchLimitLowered: the server's limit drops below what the publisher
// learned (a restart with a lower max_batch_size). The server refuses the
// next batch as too large (10199); the step fails once, the publisher
// learns the new limit, and the redone step is stored in batches of it.
func TestBatchLimitLowered(t *testing.T) {
	e := newEnv(t, 1, "a")
	cfg := e.config("a").SinkConfig.withDefaults()
	p, ctx := openPublisher(t, cfg)
	if err := batchStep(t, p, ctx, 0, 30); err != nil {
		t.Fatal(err)
	}
	if got := p.atomicMode().limit; got != maxBatch {
		t.Fatalf("learned limit %d, want the default %d", got, maxBatch)
	}
	e.restartNATSWithBatchLimit(10)
	waitFor(t, 10*time.Second, "the publisher to reconnect", p.nc.IsConnected)
	err := batchStep(t, p, ctx, 30, 30)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstreamext.JSErrCodeBatchPublishExceedsLimit {
		t.Fatalf("step over the lowered limit: %v, want JetStream error 10199", err)
	}
	if errors.Is(err, ErrBatchLimit) || p.permanent != nil {
		t.Fatalf("the first refusal is permanent (%v): the publisher did not learn the new limit", err)
	}
	before := committedBatches(t, p)
	if err := batchStep(t, p, ctx, 30, 30); err != nil {
		t.Fatalf("redo at the learned limit: %v", err)
	}
	if got := p.atomicMode().limit; got != 10 {
		t.Fatalf("learned limit %d, want 10", got)
	}
	if got := committedBatches(t, p) - before; got != 3 {
		t.Fatalf("the redo committed %d batches, want 3 of 10", got)
	}
	checkExactlyOnceInOrder(t, e.streamMsgs(testStream), coords("a", 0, 60))
}

// TestBatchLimitRefusedTwiceStopsTheBridge: a server that refuses batches
// as too large at the limit it reported (a probe that lies stands in for
// it) is refused once, learned again and refused again: the bridge stops
// with a *BatchLimitError naming the stream and the limit, rather than
// retry forever, and stores nothing.
func TestBatchLimitRefusedTwiceStopsTheBridge(t *testing.T) {
	e := newEnv(t, 1, "events")
	e.restartNATSWithBatchLimit(10)
	produceN(e, "events", 1, 0, 40)
	var probes int
	b, _ := newHooked(t, e.config("events"))
	b.pub.probe = func(context.Context, string) (int, error) {
		probes++ // on the step goroutine only
		return 20, nil
	}
	r := e.start(b)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the bridge retries batches its server refuses")
	}
	var le *BatchLimitError
	if !errors.Is(r.err, ErrBatchLimit) || !errors.As(r.err, &le) {
		t.Fatalf("Run = %v, want a *BatchLimitError", r.err)
	}
	if le.Stream != testStream || le.Limit != 20 || le.Size != 20 {
		t.Fatalf("BatchLimitError %+v, want stream %s, limit 20, size 20", le, testStream)
	}
	var se *stage.StepError
	if !errors.As(r.err, &se) {
		t.Fatalf("Run = %v, want a StepError naming the record", r.err)
	}
	if probes != 2 {
		t.Fatalf("%d probes, want 2: the first limit and one after the first refusal", probes)
	}
	if n := len(e.streamMsgs(testStream)); n != 0 {
		t.Fatalf("the stream holds %d messages of refused batches", n)
	}
}
