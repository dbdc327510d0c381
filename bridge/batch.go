package bridge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"
)

// PublishMode selects how a step's records reach JetStream.
type PublishMode int

const (
	// AtomicBatch publishes each step as one atomic JetStream batch (NATS
	// Server 2.12 or later; the stream must allow atomic publish): the
	// stream stores all of a step's records, in delivered order, or none.
	// A stream that does not allow atomic publish is refused at startup
	// with ErrAtomicPublish. The default.
	AtomicBatch PublishMode = iota
	// AtomicBatchOrPerMessage is AtomicBatch on a stream that allows
	// atomic publish and PerMessage, with a warning, on one that does not.
	AtomicBatchOrPerMessage
	// PerMessage publishes record by record, at most MaxInFlight awaiting
	// acknowledgement and at most one per subject (see Config.MaxInFlight).
	PerMessage
)

func (m PublishMode) String() string {
	switch m {
	case AtomicBatch:
		return "AtomicBatch"
	case AtomicBatchOrPerMessage:
		return "AtomicBatchOrPerMessage"
	case PerMessage:
		return "PerMessage"
	}
	return fmt.Sprintf("PublishMode(%d)", int(m))
}

// maxBatch is the most messages of one atomic batch: JetStream's default
// limit (server option max_batch_size, jetstream limits). A step that
// delivers more is published as consecutive batches of at most maxBatch.
const maxBatch = 1000

// ErrAtomicPublish: the configuration asks for atomic batches and the
// stream does not allow atomic publish.
var ErrAtomicPublish = errors.New("bridge: stream does not allow atomic publish")

// settleBatches publishes the step's records as consecutive atomic
// batches of at most maxBatch, stopping at the first that fails. Each
// batch is stored whole, in order, or not at all; a step split in several
// batches can leave its first batches stored when a later one fails, and
// its redo then finds them stored (see publishOneByOne).
func (p *publisher) settleBatches(ctx context.Context) {
	for start := 0; start < len(p.batch) && p.failed == nil; start += maxBatch {
		p.publishBatch(ctx, start, min(start+maxBatch, len(p.batch)))
	}
}

// publishBatch publishes p.batch[start:end] as one atomic batch.
func (p *publisher) publishBatch(ctx context.Context, start, end int) {
	n := end - start
	first, last := p.step[start].coord.String(), p.step[end-1].coord.String()
	if p.conn.Load() != p.epoch || !p.nc.IsConnected() {
		p.failed = fmt.Errorf("bridge: publish batch %s..%s: %w", first, last, errConnChanged)
		return
	}
	actx, cancel := context.WithTimeout(ctx, p.cfg.AckTimeout)
	defer cancel()
	p.m.inFlight.Add(float64(n))
	defer p.m.inFlight.Sub(float64(n))
	t0 := time.Now()
	// No flow control: the batch's records go out back to back and only
	// the commit waits for an answer. A record the stream refuses, or a
	// gap left by a broken connection, makes the stream abandon the batch
	// and the commit fail.
	ack, err := p.publishMsgBatch(actx, p.batch[start:end])
	var apiErr *jetstream.APIError
	switch {
	case err == nil && ack.Stream != p.stream:
		err = fmt.Errorf("acknowledged by stream %q, not %q", ack.Stream, p.stream)
	case err == nil && ack.BatchSize != uint64(n):
		err = fmt.Errorf("acknowledged %d records, sent %d", ack.BatchSize, n)
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstreamext.JSErrCodeBatchPublishDuplicateMsgID:
		// An earlier attempt of this step, or a batch of it, is stored:
		// the stream refuses a batch holding a stored message ID whole.
		p.log.Info("bridge: a batch holds records JetStream stored already; publishing it one record at a time", "first", first, "last", last, "records", n)
		p.publishOneByOne(ctx, start, end)
		return
	}
	if err != nil {
		p.m.failures.Add(float64(n))
		p.failed = fmt.Errorf("bridge: publish batch %s..%s (%d records): %w", first, last, n, err)
		return
	}
	// The batch is stored contiguously in order, ending at ack.Sequence.
	for i := start; i < end; i++ {
		p.step[i].seq = ack.Sequence - uint64(end-1-i)
	}
	p.m.latency.Observe(time.Since(t0).Seconds())
	p.m.published.Add(float64(n))
}

// publishMsgBatch sends msgs as one atomic batch and waits for the
// commit's acknowledgement.
func (p *publisher) publishMsgBatch(ctx context.Context, msgs []*nats.Msg) (*jetstreamext.BatchAck, error) {
	return jetstreamext.PublishMsgBatch(ctx, p.js, msgs, jetstreamext.BatchFlowControl{AckFirst: false, AckTimeout: p.cfg.AckTimeout})
}

// publishOneByOne publishes p.batch[start:end] record by record, each
// after the previous one's acknowledgement, so the stream keeps delivered
// order among what it did not hold yet and absorbs what it did by message
// ID. A broken connection or a failure stops it: nothing later in the
// step is sent.
func (p *publisher) publishOneByOne(ctx context.Context, start, end int) {
	for i := start; i < end && p.failed == nil; i++ {
		msg := p.batch[i]
		for _, h := range []string{jetstreamext.BatchIDHeader, jetstreamext.BatchSeqHeader, jetstreamext.BatchCommitHeader} {
			msg.Header.Del(h)
		}
		msg.Reply = ""
		coord := p.step[i].coord.String()
		if p.conn.Load() != p.epoch || !p.nc.IsConnected() {
			p.failed = fmt.Errorf("bridge: publish of %s: %w", coord, errConnChanged)
			return
		}
		actx, cancel := context.WithTimeout(ctx, p.cfg.AckTimeout)
		t0 := time.Now()
		p.m.inFlight.Inc()
		ack, err := p.js.PublishMsg(actx, msg, jetstream.WithRetryAttempts(0), jetstream.WithExpectStream(p.stream))
		p.m.inFlight.Dec()
		cancel()
		if err == nil && ack.Stream != p.stream {
			err = fmt.Errorf("acknowledged by stream %q, not %q", ack.Stream, p.stream)
		}
		if err != nil {
			p.m.failures.Inc()
			p.failed = fmt.Errorf("bridge: publish of %s to %q: %w", coord, msg.Subject, err)
			return
		}
		p.step[i].seq = ack.Sequence
		p.m.latency.Observe(time.Since(t0).Seconds())
		p.m.published.Inc()
		if ack.Duplicate {
			p.m.duplicates.Inc()
		}
	}
}
