package observer_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/observer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func byCode(fs []observer.Finding, code observer.Code, coord string) (observer.Finding, bool) {
	for _, f := range fs {
		if f.Code == code && (coord == "" || strings.Contains(strings.Join(f.Coordinates, " "), coord)) {
			return f, true
		}
	}
	return observer.Finding{}, false
}

func openErrors(t *testing.T, o *observer.Observer) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(o.Collector())
	n, err := testutil.GatherAndCount(reg, "parsley_observer_findings_by_severity")
	if err != nil || n != 3 {
		t.Fatalf("findings_by_severity: %d series, %v", n, err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "parsley_observer_findings_by_severity" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "severity" && l.GetValue() == "error" {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatal("no error series")
	return 0
}

// TestAcknowledgeStopsCounting: an acknowledged finding keeps its place
// and its history, says who and why, and no longer counts as open in the
// metrics; a bad acknowledgement is refused and changes nothing.
func TestAcknowledgeStopsCounting(t *testing.T) {
	ctx := ctxFor(t)
	c := broker.New(t)
	b := builder(t, c)
	if _, err := b.Faulty(ctx); err != nil {
		t.Fatal(err)
	}
	st, o := scan(t, ctx, c)
	fs, err := o.Findings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fs {
		if f.ID == 0 || f.State != observer.StateOpen || f.Key == "" || f.FirstSeen.IsZero() {
			t.Errorf("after the first evaluation %s: id %d, state %q, key %q, first seen %v; want recorded, open", f.Code, f.ID, f.State, f.Key, f.FirstSeen)
		}
	}
	gap, ok := byCode(fs, observer.CodeSequenceGap, "")
	if !ok {
		t.Fatal("no sequence gap")
	}
	if got := openErrors(t, o); got != 4 {
		t.Fatalf("open errors before acknowledging: %v, want 4", got)
	}
	for _, tc := range []struct {
		id         int64
		by, reason string
		want       error
	}{
		{gap.ID, "", "known", observer.ErrBadAck},
		{gap.ID, "alice", "  ", observer.ErrBadAck},
		{gap.ID, "alice", strings.Repeat("x", 1001), observer.ErrBadAck},
		{999999, "alice", "known", observer.ErrNotFound},
	} {
		if _, err := st.Acknowledge(ctx, tc.id, tc.by, tc.reason); !errors.Is(err, tc.want) {
			t.Errorf("Acknowledge(%d, %q, %d chars): %v, want %v", tc.id, tc.by, len(tc.reason), err, tc.want)
		}
	}
	if f, err := st.Finding(ctx, gap.ID); err != nil || f.State != observer.StateOpen || f.Ack != nil {
		t.Fatalf("after refused acknowledgements the gap is %q %+v (%v); want open, unacknowledged", f.State, f.Ack, err)
	}
	acked, err := st.Acknowledge(ctx, gap.ID, "alice", "replayed from a backup; the lost sends are known")
	if err != nil {
		t.Fatal(err)
	}
	if acked.State != observer.StateAcknowledged || acked.Ack == nil || acked.Ack.By != "alice" || !strings.Contains(acked.Ack.Reason, "backup") {
		t.Errorf("acknowledged gap: %q %+v", acked.State, acked.Ack)
	}
	fs, err = o.Findings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := byCode(fs, observer.CodeSequenceGap, ""); f.State != observer.StateAcknowledged {
		t.Errorf("after re-evaluation the gap is %q, want acknowledged", f.State)
	}
	if got := openErrors(t, o); got != 3 {
		t.Errorf("open errors after acknowledging the gap: %v, want 3", got)
	}
	h, err := st.History(ctx, gap.ID)
	if err != nil || len(h) != 1 || h[0].What != "acknowledged" || h[0].By != "alice" || !strings.Contains(h[0].Why, "backup") {
		t.Errorf("history: %+v %v", h, err)
	}
}

// TestDerivedFindingResolvesAndReopens: a claim past the log end is
// resolved once the log reaches the claimed offset (a committed record is
// there now), kept through the closed retention, then dropped.
func TestDerivedFindingResolvesAndReopens(t *testing.T) {
	ctx := ctxFor(t)
	c := broker.New(t)
	b := builder(t, c)
	if _, err := b.Faulty(ctx); err != nil {
		t.Fatal(err)
	}
	st, o := scan(t, ctx, c)
	past := b.At("base", 0, 100).String()
	fs, err := o.Findings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, ok := byCode(fs, observer.CodeUnsettleableClaim, past)
	if !ok || f.State != observer.StateOpen || f.Severity != observer.SeverityError {
		t.Fatalf("claim past the log end: %+v", f)
	}
	if _, err := st.Acknowledge(ctx, f.ID, "bob", "a writer bug, fixed in 1.2"); err != nil {
		t.Fatal(err)
	}
	// base has 10 records; 91 more put a record at offset 100.
	for range 91 {
		if _, err := b.Stamped(ctx, "base", 0, &headers.Stamp{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	fs, err = o.Findings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := byCode(fs, observer.CodeUnsettleableClaim, past)
	if !ok || r.State != observer.StateResolved || r.Resolved == nil || r.Ack == nil || r.Ack.By != "bob" {
		t.Fatalf("after the log reached offset 100 the claim is %+v; want resolved, its acknowledgement kept", r)
	}
	h, _ := st.History(ctx, f.ID)
	if len(h) != 2 || h[0].What != "acknowledged" || h[1].What != "resolved" {
		t.Errorf("history: %+v", h)
	}
	// Other findings are untouched.
	if g, _ := byCode(fs, observer.CodeSequenceGap, ""); g.State != observer.StateOpen {
		t.Errorf("the gap is %q, want open", g.State)
	}
	// Within the retention it stays; past it, it is gone.
	o2, err := observer.New(observer.Config{Brokers: c.Addrs(), Topics: []string{"base"}, ClosedRetention: time.Hour}, st)
	if err != nil {
		t.Fatal(err)
	}
	defer o2.Close()
	if _, err := o2.Findings(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Finding(ctx, f.ID); err != nil {
		t.Errorf("resolved a moment ago, dropped under a 1h retention: %v", err)
	}
	if _, err := st.DB().ExecContext(ctx, `UPDATE findings SET resolved_at = resolved_at - 7200000 WHERE id = ?`, f.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := o2.Findings(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Finding(ctx, f.ID); !errors.Is(err, observer.ErrNotFound) {
		t.Errorf("resolved 2h ago under a 1h retention: %v, want ErrNotFound", err)
	}
	var events int
	st.DB().QueryRowContext(ctx, `SELECT count(*) FROM finding_events WHERE finding = ?`, f.ID).Scan(&events)
	if events != 0 {
		t.Errorf("%d history events of the dropped finding remain", events)
	}
}

// TestIngestFindingResolvesWhenTheLogDropsItsRecords: a sequence gap
// names records in the log; once the log start passes them it is
// resolved. Without broker offsets nothing is resolved.
func TestIngestFindingResolvesWhenTheLogDropsItsRecords(t *testing.T) {
	ctx := ctxFor(t)
	c := broker.New(t)
	b := builder(t, c)
	if _, err := b.Faulty(ctx); err != nil {
		t.Fatal(err)
	}
	st, o := scan(t, ctx, c)
	if _, err := o.Findings(ctx); err != nil {
		t.Fatal(err)
	}
	deleteAll(t, ctx, c, "gap")
	// The store alone cannot say: nothing changes.
	fs, err := st.Findings(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := byCode(fs, observer.CodeSequenceGap, ""); g.State != observer.StateOpen {
		t.Errorf("judged without offsets the gap is %q, want open", g.State)
	}
	fs, err = o.Findings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g, _ := byCode(fs, observer.CodeSequenceGap, "")
	if g.State != observer.StateResolved || g.Resolved == nil || !strings.Contains(g.Resolved.Why, "log") {
		t.Errorf("after the log dropped its records the gap is %q %+v, want resolved", g.State, g.Resolved)
	}
	if r, _ := byCode(fs, observer.CodeStampRegression, ""); r.State != observer.StateOpen {
		t.Errorf("the regression (topic regress, untouched) is %q, want open", r.State)
	}
}

func deleteAll(t *testing.T, ctx context.Context, c *broker.Cluster, topic string) {
	t.Helper()
	ends, err := c.Admin().ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Admin().DeleteRecords(ctx, kadm.Offsets(ends.Offsets()))
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
}

// TestUnlistedOffsetsJudgeNothing: while the brokers list no offsets of a
// channel (a leader moving, say), no finding naming it is resolved — a
// claim past a log end the log has since reached, a gap whose records the
// log has since dropped — and once they are listed again, both are.
// Before, a channel missing from a listing read as a claim below the log
// end: the finding resolved, to be raised again at the next evaluation.
func TestUnlistedOffsetsJudgeNothing(t *testing.T) {
	broker.KfakeOnly(t, "fails ListOffsets through a kfake Control hook")
	ctx := ctxFor(t)
	c := broker.New(t)
	b := builder(t, c)
	if _, err := b.Faulty(ctx); err != nil {
		t.Fatal(err)
	}
	st, o := scan(t, ctx, c)
	past := b.At("base", 0, 100).String()
	fs, err := o.Findings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := byCode(fs, observer.CodeUnsettleableClaim, past); !ok || f.State != observer.StateOpen {
		t.Fatalf("claim past the log end: %+v", f)
	}
	// The log reaches offset 100 and drops the gap's records.
	for range 91 {
		if _, err := b.Stamped(ctx, "base", 0, &headers.Stamp{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	deleteAll(t, ctx, c, "gap")

	var fail atomic.Bool
	fail.Store(true)
	c.Fake().ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.Fake().KeepControl()
		if !fail.Load() {
			return nil, nil, false
		}
		lr := req.(*kmsg.ListOffsetsRequest)
		resp := lr.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range lr.Topics {
			t := kmsg.NewListOffsetsResponseTopic()
			t.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				p := kmsg.NewListOffsetsResponseTopicPartition()
				p.Partition = rp.Partition
				p.ErrorCode = kerr.UnknownServerError.Code
				t.Partitions = append(t.Partitions, p)
			}
			resp.Topics = append(resp.Topics, t)
		}
		return resp, nil, true
	})
	offs, err := o.Offsets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if co := offs[b.Ch("base", 0)]; !co.Unknown || co.Name != "base" {
		t.Fatalf("base/0 listed as %+v while the brokers give no offsets", co)
	}
	fs, err = o.Findings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := byCode(fs, observer.CodeUnsettleableClaim, past); f.State != observer.StateOpen {
		t.Errorf("with base's offsets unknown the claim is %q, want open", f.State)
	}
	if g, _ := byCode(fs, observer.CodeSequenceGap, ""); g.State != observer.StateOpen {
		t.Errorf("with gap's offsets unknown the gap is %q, want open", g.State)
	}

	fail.Store(false)
	fs, err = o.Findings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := byCode(fs, observer.CodeUnsettleableClaim, past); f.State != observer.StateResolved {
		t.Errorf("listed again, the log past it: the claim is %q, want resolved", f.State)
	}
	if g, _ := byCode(fs, observer.CodeSequenceGap, ""); g.State != observer.StateResolved {
		t.Errorf("listed again, its records dropped: the gap is %q, want resolved", g.State)
	}
	for _, f := range fs {
		h, err := st.History(ctx, f.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range h {
			if e.What == "reopened" {
				t.Errorf("%s was reopened: %+v", f.Key, h)
			}
		}
	}
}
