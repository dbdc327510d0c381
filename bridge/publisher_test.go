package bridge

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
// its coordinate, counts duplicates, a foreign stream and sequences that
// fall (the stream's order differs from the delivered order).
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
		{"later record stored first", []resolved{ack(11, false), ack(10, true)}, false, 2, 1, 1},
		{"failure", []resolved{ack(1, false), {err: errors.New("timeout")}, ack(3, false)}, true, 2, 0, 0},
		{"foreign stream", []resolved{{ack: &jetstream.PubAck{Stream: "T", Sequence: 1}}}, true, 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &publisher{stream: "S", m: newMetrics("S"), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
			ctx := context.Background()
			p.lastSeq = 100 // an aborted attempt got further: no violation
			p.Begin(ctx)
			for i, f := range tc.futures {
				p.pending = append(p.pending, inflight{f: f, subj: "s", coord: "c" + string(rune('0'+i))})
				p.bySubj["s"]++
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
			if len(p.pending) != 0 || len(p.bySubj) != 0 {
				t.Errorf("left %d pending, %v per subject", len(p.pending), p.bySubj)
			}
		})
	}
}
