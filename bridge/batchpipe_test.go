package bridge

import (
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// TestPipelinedCommitFails: a step of three batches (server limit 10)
// whose first batch the stream abandons (a record above the stream's
// message size leaves a gap in it). The second batch was streamed while the
// first one's commit was in flight; it must never be committed: the step
// fails naming the first batch, and the stream holds nothing of the step.
func TestPipelinedCommitFails(t *testing.T) {
	e := newEnv(t, 1, "a")
	e.restartNATSWithBatchLimit(10)
	e.updateStream(func(c *jetstream.StreamConfig) { c.MaxMsgSize = 1024 })
	p, ctx := openPublisher(t, e.config("a").SinkConfig.withDefaults())
	err := batchStep(t, p, ctx, 0, 30, 3)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstreamext.JSErrCodeBatchPublishIncomplete {
		t.Fatalf("Settle = %v, want the first batch refused as incomplete (10176)", err)
	}
	if got := e.streamMsgs(testStream); len(got) != 0 {
		t.Fatalf("the stream holds %d messages (first %s) of a step whose first batch failed", len(got), got[0].coord)
	}
	if v := testutil.ToFloat64(p.m.inFlight); v != 0 {
		t.Fatalf("%v publishes in flight after the step", v)
	}
	// The redo, without the record the stream refuses, stores the step.
	if err := batchStep(t, p, ctx, 0, 30); err != nil {
		t.Fatal(err)
	}
	checkExactlyOnceInOrder(t, e.streamMsgs(testStream), coords("a", 0, 30))
}

// TestPipelinedRedo: the redo of an acknowledged step of three batches,
// extended by a fourth: each of the first three is refused whole for its
// stored message IDs while the next one streams, and is published record by
// record before the next one commits. The stream holds every record once,
// in delivered order, and the order check raises nothing.
func TestPipelinedRedo(t *testing.T) {
	e := newEnv(t, 1, "a")
	e.restartNATSWithBatchLimit(10)
	p, ctx := openPublisher(t, e.config("a").SinkConfig.withDefaults())
	if err := batchStep(t, p, ctx, 0, 30); err != nil {
		t.Fatal(err)
	}
	if err := batchStep(t, p, ctx, 0, 40); err != nil {
		t.Fatal(err)
	}
	got := e.streamMsgs(testStream)
	want := coords("a", 0, 40)
	checkExactlyOnceInOrder(t, got, want)
	checkDeliveredPrefix(t, got, want)
	if d := testutil.ToFloat64(p.m.duplicates); d != 30 {
		t.Fatalf("%v duplicates, want the 30 records stored before", d)
	}
	if v := testutil.ToFloat64(p.m.orderViolations); v != 0 {
		t.Fatalf("%v order violations", v)
	}
	for i, r := range p.step {
		if r.seq != uint64(i+1) {
			t.Fatalf("record %d (%s) has stream sequence %d, want %d", i, r.coord, r.seq, i+1)
		}
	}
}
