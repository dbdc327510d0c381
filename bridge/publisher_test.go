package bridge

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/stage"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// resolved is a PubAckFuture that has already resolved.
type resolved struct {
	ack *jetstream.PubAck
	err error
}

func (r resolved) Ok() <-chan *jetstream.PubAck {
	c := make(chan *jetstream.PubAck, 1)
	if r.ack != nil {
		c <- r.ack
	}
	return c
}

func (r resolved) Err() <-chan error {
	c := make(chan error, 1)
	if r.err != nil {
		c <- r.err
	}
	return c
}

func (resolved) Msg() *nats.Msg { return nil }

// TestAcknowledgementAccounting: Settle reports the first failure with
// its coordinate, counts duplicates and refuses a foreign stream.
// Sequences that fall among records the stamps do not relate are no
// order violation (TestOrderCheckJudgesCausalOrder covers related ones).
func TestAcknowledgementAccounting(t *testing.T) {
	ack := func(seq uint64, dup bool) resolved {
		return resolved{ack: &jetstream.PubAck{Stream: "S", Sequence: seq, Duplicate: dup}}
	}
	for _, tc := range []struct {
		name                  string
		futures               []resolved
		wantErr               bool
		published, dups, viol float64
	}{
		{"rising", []resolved{ack(1, false), ack(2, false), ack(5, false)}, false, 3, 0, 0},
		{"redo absorbed", []resolved{ack(4, true), ack(5, true), ack(6, false)}, false, 3, 2, 0},
		{"concurrent record stored first", []resolved{ack(11, false), ack(10, true)}, false, 2, 1, 0},
		{"failure", []resolved{ack(1, false), {err: errors.New("timeout")}, ack(3, false)}, true, 2, 0, 0},
		{"foreign stream", []resolved{{ack: &jetstream.PubAck{Stream: "T", Sequence: 1}}}, true, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPublisher(SinkConfig{Stream: "S", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, newMetrics("S"))
			ctx := context.Background()
			p.Begin(ctx)
			for i, f := range tc.futures {
				p.step = append(p.step, storedRecord{coord: headers.Coordinate{Offset: int64(i)}})
				p.perMsg().pending = append(p.perMsg().pending, inflight{f: f, subj: "s", rec: i})
				p.perMsg().bySubj["s"]++
				p.m.inFlight.Inc()
			}
			err := p.Settle(ctx)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Settle = %v, want error %v", err, tc.wantErr)
			}
			if err != nil && tc.name == "failure" && !errors.Is(err, tc.futures[1].err) {
				t.Fatalf("Settle = %v, want the publish's error", err)
			}
			for name, c := range map[string]struct{ got, want float64 }{
				"published":  {testutil.ToFloat64(p.m.published), tc.published},
				"duplicates": {testutil.ToFloat64(p.m.duplicates), tc.dups},
				"violations": {testutil.ToFloat64(p.m.orderViolations), tc.viol},
				"in flight":  {testutil.ToFloat64(p.m.inFlight), 0},
			} {
				if c.got != c.want {
					t.Errorf("%s = %v, want %v", name, c.got, c.want)
				}
			}
			if len(p.perMsg().pending) != 0 || len(p.perMsg().bySubj) != 0 {
				t.Errorf("left %d pending, %v per subject", len(p.perMsg().pending), p.perMsg().bySubj)
			}
		})
	}
}

// stampedRecord is a record of channel ch at offset off whose stamp
// claims the given offsets (an offset entry per channel) and, when
// sender is not zero, carries a sender tag with send sequence seq.
func stampedRecord(t *testing.T, ch headers.Channel, off int64, claims map[headers.Channel]int64, sender headers.SenderID, seq int64) storedRecord {
	t.Helper()
	var s headers.Stamp
	for c, o := range claims {
		s.Clock.SetOffset(c, o)
	}
	if sender != (headers.SenderID{}) {
		s.Tagged, s.Sender, s.Seq = true, sender, seq
	}
	hs, err := headers.AppendStamp([]stage.Header(nil), &s, headers.DialectVC)
	if err != nil {
		t.Fatal(err)
	}
	return storedRecord{coord: headers.Coordinate{Channel: ch, Offset: off}, headers: hs}
}

// TestOrderCheckJudgesCausalOrder: the order alarm fires when a record is
// stored after a record whose stamp claims it as a cause, and only then.
// The first case is the soak's false alarm: a redone step delivered two
// concurrent records in another order than the attempt JetStream kept.
func TestOrderCheckJudgesCausalOrder(t *testing.T) {
	a := headers.Channel{Topic: headers.TopicID{1}, Partition: 0}
	b := headers.Channel{Topic: headers.TopicID{2}, Partition: 0}
	sender := headers.SenderID{9}
	type delivery struct {
		rec storedRecord
		seq uint64 // stream sequence the acknowledgement reports
		dup bool
	}
	for _, tc := range []struct {
		name  string
		steps []delivery
		viol  float64
	}{
		{"redo delivers concurrent records in another order", []delivery{
			{stampedRecord(t, a, 612, map[headers.Channel]int64{b: 301, a: 602}, headers.SenderID{}, 0), 3134, true},
			{stampedRecord(t, b, 302, nil, headers.SenderID{}, 0), 3118, true},
		}, 0},
		{"cause stored after its effect (offset claim)", []delivery{
			{stampedRecord(t, b, 301, nil, headers.SenderID{}, 0), 3134, false},
			{stampedRecord(t, a, 612, map[headers.Channel]int64{b: 301}, headers.SenderID{}, 0), 3118, true},
		}, 1},
		{"cause stored after its effect (sequence claim)", []delivery{
			{stampedRecord(t, b, 40, nil, sender, 7), 3134, false},
			{func() storedRecord {
				r := stampedRecord(t, a, 612, nil, headers.SenderID{}, 0)
				var s headers.Stamp
				s.Clock.SetSeq(b, sender, 7)
				hs, err := headers.AppendStamp([]stage.Header(nil), &s, headers.DialectVC)
				if err != nil {
					t.Fatal(err)
				}
				r.headers = hs
				return r
			}(), 3118, true},
		}, 1},
		{"causes first", []delivery{
			{stampedRecord(t, b, 301, nil, headers.SenderID{}, 0), 10, false},
			{stampedRecord(t, a, 612, map[headers.Channel]int64{b: 301}, headers.SenderID{}, 0), 11, false},
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPublisher(SinkConfig{Stream: "S", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, newMetrics("S"))
			ctx := context.Background()
			p.Begin(ctx)
			for i, d := range tc.steps {
				p.step = append(p.step, d.rec)
				p.perMsg().pending = append(p.perMsg().pending, inflight{f: resolved{ack: &jetstream.PubAck{Stream: "S", Sequence: d.seq, Duplicate: d.dup}}, subj: "s", rec: i})
				p.perMsg().bySubj["s"]++
			}
			if err := p.Settle(ctx); err != nil {
				t.Fatal(err)
			}
			if v := testutil.ToFloat64(p.m.orderViolations); v != tc.viol {
				t.Fatalf("order violations %v, want %v", v, tc.viol)
			}
		})
	}
}

// pendingFuture never resolves.
type pendingFuture struct{}

func (pendingFuture) Ok() <-chan *jetstream.PubAck { return nil }
func (pendingFuture) Err() <-chan error            { return nil }
func (pendingFuture) Msg() *nats.Msg               { return nil }

// TestSettleAndBeginReturnWhenTheStepEnds: a publish that never resolves
// does not hold Settle or the next Begin past their context; Settle fails
// with the context's error and Begin forgets the publish.
func TestSettleAndBeginReturnWhenTheStepEnds(t *testing.T) {
	p := newPublisher(SinkConfig{Stream: "S", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, newMetrics("S"))
	p.Begin(context.Background())
	p.step = append(p.step, storedRecord{})
	p.perMsg().pending = append(p.perMsg().pending, inflight{f: pendingFuture{}, subj: "s"})
	p.perMsg().bySubj["s"]++
	p.m.inFlight.Inc()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := p.Settle(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Settle = %v, want context.Canceled", err)
	}
	p.Begin(ctx)
	if len(p.perMsg().pending) != 0 || len(p.perMsg().bySubj) != 0 || testutil.ToFloat64(p.m.inFlight) != 0 {
		t.Fatalf("Begin left %d pending, %v per subject, gauge %v", len(p.perMsg().pending), p.perMsg().bySubj, testutil.ToFloat64(p.m.inFlight))
	}
}
