package bridge

import (
	"context"
	"encoding/json"
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

// ErrAtomicPublish: the configuration asks for atomic batches and the
// stream does not allow atomic publish.
var ErrAtomicPublish = errors.New("bridge: stream does not allow atomic publish")

// atomicBatches is the AtomicBatch mode: each step's records stream into
// atomic batches as the gate delivers them, and settle commits the last.
//
// It speaks JetStream's atomic batch protocol over nats.go itself rather
// than through orbit.go's BatchPublisher, so that a full batch's commit is
// sent without waiting for its answer: the next batch streams while the
// server commits the previous one (see stageRecord).
type atomicBatches struct {
	p       *publisher
	batch   []*nats.Msg // the step's messages in delivered order
	staging *openBatch  // the batch being streamed
	// committing is the batch whose commit was sent and not yet answered:
	// at most one at a time.
	committing *openBatch
	inbox      string         // prefix of the commits' reply subjects: <inbox>.<batch ID>
	answers    chan *nats.Msg // the commits' answers
	// limit is the most messages of one batch: the server's limit, up
	// to maxProbedBatch, once probeLimit learned it; 0 until then, and
	// again after the server refused a batch for its size.
	limit int
	// refused: the server refused the last batch for its size, and no
	// batch committed since. A second refusal, at the limit learned after
	// the first, is permanent: the step fails with a *BatchLimitError
	// rather than retry forever.
	refused bool
}

// atomicAnswers is the capacity of the channel commit answers arrive on:
// one commit is awaited at a time, and answers to abandoned ones are few.
const atomicAnswers = 64

// newAtomicBatches subscribes to the answers of p's commits, on p's
// connection: closing the connection ends the subscription.
func newAtomicBatches(p *publisher) (*atomicBatches, error) {
	x := &atomicBatches{p: p, inbox: p.nc.NewInbox(), answers: make(chan *nats.Msg, atomicAnswers)}
	if _, err := p.nc.ChanSubscribe(x.inbox+".*", x.answers); err != nil {
		return nil, fmt.Errorf("bridge: subscribe to atomic batch answers: %w", err)
	}
	return x, nil
}

// begin gives up the batch an aborted step left open, and forgets the
// answer to a commit it left unanswered: whatever the stream does with
// that batch, it does before it sees anything of this step, which
// publishes the same records again on the same connection.
func (x *atomicBatches) begin(context.Context) {
	x.dropOpen()
	if b := x.committing; b != nil {
		x.committing = nil
		x.p.m.inFlight.Sub(float64(b.n))
	}
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

// settle waits for the commit in flight and commits the open batch, if the
// step did not fail, and drops what a failure left open.
func (x *atomicBatches) settle(ctx context.Context) {
	if x.committing != nil {
		x.awaitCommit(ctx)
	}
	if x.p.failed == nil && x.staging != nil {
		x.sendCommit(ctx)
		if x.committing != nil {
			x.awaitCommit(ctx)
		}
	}
	x.dropOpen()
}

// openBatch is an atomic batch of the step: while it is open (x.staging),
// its messages go out as the gate delivers their records, so the server
// stages them while the step goes on, all but the newest, which is held
// back to carry the commit (see stageRecord); then its commit is in
// flight (x.committing).
type openBatch struct {
	id      string // the batch ID
	start   int    // index in p.step and x.batch of its first record
	sent    int    // messages sent: x.batch[start:start+sent]
	n       int    // its messages, once its commit was sent
	subject string // of its first message
	opened  time.Time
}

// stageRecord streams the step's newest record (the last of x.batch) into
// the open batch, opening one if none is: it sends the record held back
// before it, holds this one, and sends the batch's commit when it reaches
// x.limit, learned before the publisher's first batch. A failure of NATS is
// kept in p.failed for Settle; once set, nothing more is sent.
//
// Nothing of an open batch is stored before its commit (the stream stages
// it aside), and the stream abandons a batch whose sequence has a gap, so a
// connection that breaks in the middle leaves nothing: every batch is
// stored whole, in order, or not at all. A step longer than x.limit
// publishes several batches, and their commits are pipelined, one deep:
// batch k+1 streams while the server commits batch k (on an R1 file
// stream, a sync of the file batch k was staged in), but its own commit is
// sent only once batch k's was acknowledged, and never if it failed. So
// the order and exactly-once hold as without the pipeline: no batch is
// stored after one that was not (the stream holds a delivered-order prefix
// of the step's batches), and the step's Kafka transaction commits only
// after Settle saw every batch acknowledged. Staging batch k+1 early only
// holds a second batch open on the stream (max_batch_inflight_per_stream)
// and sends its messages before batch k is known to be stored; the stream
// drops them if batch k failed (abandon). TestPipelinedCommitFails.
func (x *atomicBatches) stageRecord(ctx context.Context) {
	p := x.p
	if p.failed != nil {
		return
	}
	i := len(x.batch) - 1
	p.m.inFlight.Inc()
	b := x.staging
	if b == nil {
		if x.limit == 0 {
			x.learnLimit(ctx, x.batch[i].Subject)
			if p.failed != nil {
				p.m.inFlight.Dec()
				return
			}
		}
		b = &openBatch{id: newBatchID(p.nc), start: i, subject: x.batch[i].Subject, opened: time.Now()}
		x.staging = b // the record is held back
	} else if err := x.sendHeld(b); err != nil {
		p.failed = err
		x.dropOpen()
		return
	}
	if i-b.start+1 < x.limit {
		return
	}
	if x.committing != nil {
		x.awaitCommit(ctx) // the previous batch's
		if p.failed != nil {
			x.dropOpen()
			return
		}
	}
	x.sendCommit(ctx)
}

// sendHeld sends the open batch's held-back message.
func (x *atomicBatches) sendHeld(b *openBatch) error {
	p := x.p
	held := b.start + b.sent
	coord := p.step[held].coord // formatted only if an error names it
	if p.connLost() {
		return fmt.Errorf("bridge: publish batch from %s: %w", coord, errConnChanged)
	}
	msg := x.batch[held]
	msg.Header.Set(jetstreamext.BatchIDHeader, b.id)
	msg.Header.Set(jetstreamext.BatchSeqHeader, strconv.Itoa(b.sent+1))
	if err := p.nc.PublishMsg(msg); err != nil {
		p.m.failures.Inc()
		return fmt.Errorf("bridge: publish batch from %s: %s: %w", p.step[b.start].coord, coord, err)
	}
	b.sent++
	return nil
}

// sendCommit sends the open batch's commit, its held-back message (the
// step's newest record), and makes it the batch in flight; awaitCommit
// takes its answer.
func (x *atomicBatches) sendCommit(context.Context) {
	p := x.p
	b := x.staging
	x.staging = nil
	b.n = len(x.batch) - b.start
	if p.connLost() {
		p.m.inFlight.Sub(float64(b.n))
		p.failed = fmt.Errorf("bridge: publish batch %s..%s: %w", p.step[b.start].coord, p.step[b.start+b.n-1].coord, errConnChanged)
		x.abandon(b)
		return
	}
	msg := x.batch[b.start+b.n-1]
	msg.Header.Set(jetstreamext.BatchIDHeader, b.id)
	msg.Header.Set(jetstreamext.BatchSeqHeader, strconv.Itoa(b.sent+1))
	msg.Header.Set(jetstreamext.BatchCommitHeader, "1")
	msg.Reply = x.inbox + "." + b.id
	if err := p.nc.PublishMsg(msg); err != nil {
		p.m.inFlight.Sub(float64(b.n))
		p.m.failures.Add(float64(b.n))
		p.failed = fmt.Errorf("bridge: commit batch %s..%s: %w", p.step[b.start].coord, p.step[b.start+b.n-1].coord, err)
		x.abandon(b)
		return
	}
	x.committing = b
}

// commitAnswer is the stream's answer to a commit: the acknowledgement of
// the stored batch, or the error that refused it.
type commitAnswer struct {
	Stream string              `json:"stream"`
	Seq    uint64              `json:"seq"`
	Batch  string              `json:"batch"`
	Count  uint64              `json:"count"`
	Error  *jetstream.APIError `json:"error"`
}

// awaitCommit waits for the answer to the commit in flight, within the ack
// timeout, and accounts for it: the records' stream sequences, or
// p.failed. A batch refused whole for holding records the stream stored
// already is published again record by record.
func (x *atomicBatches) awaitCommit(ctx context.Context) {
	p := x.p
	b := x.committing
	x.committing = nil
	start, end, n := b.start, b.start+b.n, b.n
	defer p.m.inFlight.Sub(float64(n))
	first, last := p.step[start].coord.String(), p.step[end-1].coord.String()
	a, err := x.answer(ctx, b)
	switch {
	case err != nil:
	case a.Error != nil:
		err = a.Error
	case a.Stream != p.stream:
		err = fmt.Errorf("acknowledged by stream %q, not %q", a.Stream, p.stream)
	case a.Count != uint64(n):
		err = fmt.Errorf("acknowledged %d records, sent %d", a.Count, n)
	}
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstreamext.JSErrCodeBatchPublishExceedsLimit:
		p.m.failures.Add(float64(n))
		x.refuse(n, fmt.Errorf("bridge: publish batch %s..%s (%d records): %w", first, last, n, err))
		return
	case errors.As(err, &apiErr) && apiErr.ErrorCode == jetstreamext.JSErrCodeBatchPublishDuplicateMsgID:
		// An earlier attempt of this step, or a batch of it, is stored:
		// the stream refuses a batch holding a stored message ID whole.
		p.log.Info("bridge: a batch holds records JetStream stored already; publishing it one record at a time", "first", first, "last", last, "records", n)
		x.publishOneByOne(ctx, start, end)
		return
	case err != nil:
		p.m.failures.Add(float64(n))
		p.failed = fmt.Errorf("bridge: publish batch %s..%s (%d records): %w", first, last, n, err)
		return
	}
	x.refused = false
	// The batch is stored contiguously in order, ending at a.Seq.
	for i := start; i < end; i++ {
		p.step[i].seq = a.Seq - uint64(end-1-i)
	}
	p.m.latency.Observe(time.Since(b.opened).Seconds())
	p.m.published.Add(float64(n))
}

// answer returns the stream's answer to b's commit, dropping answers to
// commits an aborted step left unanswered.
func (x *atomicBatches) answer(ctx context.Context, b *openBatch) (*commitAnswer, error) {
	timer := time.NewTimer(x.p.cfg.AckTimeout)
	defer timer.Stop()
	reply := x.inbox + "." + b.id
	for {
		select {
		case m := <-x.answers:
			if m.Subject != reply {
				continue
			}
			a := &commitAnswer{}
			if err := json.Unmarshal(m.Data, a); err != nil {
				return nil, fmt.Errorf("undecodable answer %q: %w", m.Data, err)
			}
			return a, nil
		case <-timer.C:
			return nil, fmt.Errorf("no answer to the commit within %v: %w", x.p.cfg.AckTimeout, context.DeadlineExceeded)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
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
