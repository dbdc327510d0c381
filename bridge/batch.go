package bridge

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
	// FastBatch publishes each step as one JetStream fast batch in
	// gap-fail mode (NATS Server 2.14 or later; the stream must allow
	// batched publish, allow_batched): the stream stores the records as
	// they arrive, pipelined, and a failure ends the batch where it
	// happened. What a failed step leaves in the stream is a prefix of it
	// in delivered order, which the redo absorbs by message ID: the
	// guarantee of PerMessage with MaxInFlight 1, at pipelined speed. It
	// is not all-or-nothing: a reader may see part of a step before the
	// step commits (never a reorder). A stream that does not allow
	// batched publish is refused at startup with ErrFastBatch.
	FastBatch
)

func (m PublishMode) String() string {
	switch m {
	case AtomicBatch:
		return "AtomicBatch"
	case AtomicBatchOrPerMessage:
		return "AtomicBatchOrPerMessage"
	case PerMessage:
		return "PerMessage"
	case FastBatch:
		return "FastBatch"
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

// atomicBatches is the AtomicBatch mode: each step's records stream into
// an atomic batch as the gate delivers them, and settle commits it.
type atomicBatches struct {
	p       *publisher
	batch   []*nats.Msg // the step's messages in delivered order
	staging *openBatch  // the batch being streamed
}

// begin gives up the batch an aborted step left open.
func (x *atomicBatches) begin(context.Context) {
	x.dropOpen()
	clear(x.batch)
	x.batch = x.batch[:0]
}

func (x *atomicBatches) send(ctx context.Context, msg *nats.Msg, rec storedRecord) {
	p := x.p
	msg.Header.Set(jetstream.ExpectedStreamHeader, p.stream)
	p.step = append(p.step, rec)
	x.batch = append(x.batch, msg)
	x.stageRecord(ctx)
}

// settle commits the open batch, if the step did not fail, and drops what
// a failure left open.
func (x *atomicBatches) settle(ctx context.Context) {
	if x.p.failed == nil && x.staging != nil {
		x.commitOpen(ctx)
	}
	x.dropOpen()
}

// openBatch is the atomic batch a step is streaming to JetStream: its
// messages go out as the gate delivers their records, so the server stages
// them while the step goes on, all but the newest, which is held back to
// carry the commit (see stageRecord).
type openBatch struct {
	pub     jetstreamext.BatchPublisher
	start   int    // index in p.step and x.batch of its first record
	sent    int    // messages sent: x.batch[start:start+sent]
	id      string // the batch ID, known once a message was sent
	subject string // of its first message
	opened  time.Time
}

// stageRecord streams the step's newest record (the last of x.batch) into
// the open batch, opening one if none is: it sends the record held back
// before it, holds this one, and commits the batch when it reaches
// maxBatch. A failure of NATS is kept in p.failed for Settle; once set,
// nothing more is sent.
//
// Nothing of an open batch is stored before its commit (the stream stages
// it aside), and the stream abandons a batch whose sequence has a gap, so a
// connection that breaks in the middle leaves nothing: every batch is
// stored whole, in order, or not at all. A step longer than maxBatch
// commits its batches one after the other, the next opened only once the
// previous one's commit was acknowledged, so no batch is stored after one
// that was not.
func (x *atomicBatches) stageRecord(ctx context.Context) {
	p := x.p
	if p.failed != nil {
		return
	}
	i := len(x.batch) - 1
	p.m.inFlight.Inc()
	b := x.staging
	if b == nil {
		pub, err := jetstreamext.NewBatchPublisher(p.js, jetstreamext.BatchFlowControl{AckFirst: false, AckTimeout: p.cfg.AckTimeout})
		if err != nil {
			p.m.inFlight.Dec()
			p.failed = fmt.Errorf("bridge: open batch at %s: %w", p.step[i].coord, err)
			return
		}
		x.staging = &openBatch{pub: pub, start: i, subject: x.batch[i].Subject, opened: time.Now()}
		return // held back
	}
	if err := x.sendHeld(b); err != nil {
		p.failed = err
		x.dropOpen()
		return
	}
	if i-b.start+1 == maxBatch {
		x.commitOpen(ctx)
	}
}

// sendHeld sends the open batch's held-back message.
func (x *atomicBatches) sendHeld(b *openBatch) error {
	p := x.p
	held := b.start + b.sent
	coord := p.step[held].coord // formatted only if an error names it
	if p.connLost() {
		return fmt.Errorf("bridge: publish batch from %s: %w", coord, errConnChanged)
	}
	if err := b.pub.AddMsg(x.batch[held]); err != nil {
		p.m.failures.Inc()
		return fmt.Errorf("bridge: publish batch from %s: %s: %w", p.step[b.start].coord, coord, err)
	}
	if b.sent == 0 {
		b.id = x.batch[held].Header.Get(jetstreamext.BatchIDHeader)
	}
	b.sent++
	return nil
}

// commitOpen commits the open batch with its held-back message, the step's
// newest record, and waits for the acknowledgement.
func (x *atomicBatches) commitOpen(ctx context.Context) {
	p := x.p
	b := x.staging
	x.staging = nil
	start, end := b.start, len(x.batch)
	n := end - start
	defer p.m.inFlight.Sub(float64(n))
	first, last := p.step[start].coord.String(), p.step[end-1].coord.String()
	if p.connLost() {
		p.failed = fmt.Errorf("bridge: publish batch %s..%s: %w", first, last, errConnChanged)
		x.abandon(b)
		return
	}
	actx, cancel := context.WithTimeout(ctx, p.cfg.AckTimeout)
	defer cancel()
	ack, err := b.pub.CommitMsg(actx, x.batch[end-1])
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
		x.publishOneByOne(ctx, start, end)
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
	p.m.latency.Observe(time.Since(b.opened).Seconds())
	p.m.published.Add(float64(n))
}

// dropOpen gives up the open batch, if any, without committing it: the
// step failed before its Settle or is being retried.
func (x *atomicBatches) dropOpen() {
	p := x.p
	if b := x.staging; b != nil {
		x.staging = nil
		p.m.inFlight.Sub(float64(len(x.batch) - b.start))
		x.abandon(b)
	}
}

// abandon makes the stream drop a batch that will never be committed now
// rather than at its timeout (10 seconds by default), which keeps it
// counted against the stream's limit of batches in flight (50) and, on an
// R1 file stream, on disk. It sends a message whose batch sequence skips
// one past what was sent: the stream abandons a batch at a gap, and refuses
// a message of a batch it does not know unless it is the first one, so the
// marker is never stored. Best effort: a batch the marker does not reach
// times out.
func (x *atomicBatches) abandon(b *openBatch) {
	p := x.p
	if b.sent == 0 || !p.nc.IsConnected() {
		return // nothing staged, or nothing to send it on
	}
	h := nats.Header{}
	h.Set(jetstreamext.BatchIDHeader, b.id)
	h.Set(jetstreamext.BatchSeqHeader, strconv.Itoa(b.sent+2))
	if err := p.nc.PublishMsg(&nats.Msg{Subject: b.subject, Header: h}); err != nil {
		p.log.Debug("bridge: could not abandon a batch; the stream drops it at its timeout", "batch", b.id, "err", err)
	}
}

// publishOneByOne publishes x.batch[start:end] record by record, each
// after the previous one's acknowledgement, so the stream keeps delivered
// order among what it did not hold yet and absorbs what it did by message
// ID. A broken connection or a failure stops it: nothing later in the
// step is sent.
func (x *atomicBatches) publishOneByOne(ctx context.Context, start, end int) {
	p := x.p
	for i := start; i < end && p.failed == nil; i++ {
		msg := x.batch[i]
		for _, h := range []string{jetstreamext.BatchIDHeader, jetstreamext.BatchSeqHeader, jetstreamext.BatchCommitHeader} {
			msg.Header.Del(h)
		}
		msg.Reply = ""
		coord := p.step[i].coord
		if p.connLost() {
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
