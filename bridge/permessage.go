package bridge

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// perMessage is the PerMessage mode: each record is published as it is
// delivered, at most max awaiting acknowledgement and at most one per
// subject, and settle waits for the acknowledgements.
type perMessage struct {
	p       *publisher
	max     int // MaxInFlight
	pending []inflight
	bySubj  map[string]int // publishes in flight per subject
}

type inflight struct {
	f     jetstream.PubAckFuture
	subj  string
	rec   int // index in p.step
	start time.Time
}

func newPerMessage(p *publisher, maxInFlight int) *perMessage {
	return &perMessage{p: p, max: maxInFlight, bySubj: make(map[string]int)}
}

// begin waits out what an aborted step left in flight (each resolves
// within the ack timeout). With ctx ended the step will not settle; it
// forgets what is still in flight rather than spin until it resolves.
func (x *perMessage) begin(ctx context.Context) {
	for len(x.pending) > 0 && ctx.Err() == nil {
		x.waitOldest(ctx)
	}
	for _, in := range x.pending {
		x.p.m.inFlight.Dec()
		if x.bySubj[in.subj]--; x.bySubj[in.subj] <= 0 {
			delete(x.bySubj, in.subj)
		}
	}
	x.pending = x.pending[:0]
}

func (x *perMessage) settle(ctx context.Context) {
	p := x.p
	// If ctx ends first, the next begin accounts for the rest.
	for len(x.pending) > 0 && ctx.Err() == nil {
		x.waitOldest(ctx)
	}
	if len(x.pending) > 0 && p.failed == nil {
		p.failed = fmt.Errorf("bridge: publish of %s to %q: %w", p.step[x.pending[0].rec].coord, x.pending[0].subj, ctx.Err())
	}
}

func (x *perMessage) send(ctx context.Context, msg *nats.Msg, rec storedRecord) {
	p := x.p
	subj := msg.Subject
	for p.failed == nil && len(x.pending) > 0 && (len(x.pending) >= x.max || x.bySubj[subj] > 0) {
		x.waitOldest(ctx)
	}
	if p.failed != nil {
		return // the step aborts at Settle; publish nothing more
	}
	if p.connLost() {
		p.failed = fmt.Errorf("bridge: publish of %s: %w", rec.coord, errConnChanged)
		return
	}
	start := time.Now()
	f, err := p.js.PublishMsgAsync(msg, jetstream.WithRetryAttempts(0), jetstream.WithExpectStream(p.stream))
	if err != nil {
		p.m.failures.Inc()
		p.failed = fmt.Errorf("bridge: publish of %s to %q: %w", rec.coord, subj, err)
		return
	}
	p.step = append(p.step, rec)
	x.pending = append(x.pending, inflight{f: f, subj: subj, rec: len(p.step) - 1, start: start})
	x.bySubj[subj]++
	p.m.inFlight.Inc()
}

// waitOldest waits for the oldest publish in flight and accounts for it.
func (x *perMessage) waitOldest(ctx context.Context) {
	p := x.p
	in := x.pending[0]
	var err error
	var dup bool
	select {
	case ack := <-in.f.Ok():
		dup = ack.Duplicate
		if ack.Stream != p.stream {
			err = fmt.Errorf("acknowledged by stream %q, not %q", ack.Stream, p.stream)
			break
		}
		if in.rec < len(p.step) {
			p.step[in.rec].seq = ack.Sequence
		}
	case err = <-in.f.Err():
	case <-ctx.Done():
		// The step ran out of time; the future resolves later, within
		// the ack timeout, and the next begin drains it.
		if p.failed == nil {
			p.failed = fmt.Errorf("bridge: publish of %s to %q: %w", p.step[in.rec].coord, in.subj, ctx.Err())
		}
		return
	}
	x.pending = x.pending[1:]
	if x.bySubj[in.subj]--; x.bySubj[in.subj] <= 0 {
		delete(x.bySubj, in.subj)
	}
	p.m.inFlight.Dec()
	if err != nil {
		p.m.failures.Inc()
		if p.failed == nil {
			p.failed = fmt.Errorf("bridge: publish of %s to %q: %w", p.step[in.rec].coord, in.subj, err)
		}
		return
	}
	p.m.latency.Observe(time.Since(in.start).Seconds())
	p.m.published.Inc()
	if dup {
		p.m.duplicates.Inc()
	}
}
