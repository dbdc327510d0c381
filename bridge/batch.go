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

// maxBatch is JetStream's default limit on the messages of one atomic
// batch (server option max_batch_size, jetstream limits). The bridge
// learns the limit of the stream's server (probeLimit) before its first
// batch, and publishes a step that delivers more as consecutive batches.
const maxBatch = 1000

// maxProbedBatch is the largest batch the bridge uses when the server
// allows larger ones: the stage's default step budget (MaxStepRecords), so
// that a default step is one batch there.
const maxProbedBatch = 10_000

// ErrAtomicPublish: the configuration asks for atomic batches and the
// stream does not allow atomic publish.
var ErrAtomicPublish = errors.New("bridge: stream does not allow atomic publish")

// ErrBatchLimit: the stream's server refused atomic batches for their size
// (JetStream error 10199) again after the bridge had learned its limit.
// Retrying would be refused the same way: the step fails instead (a
// *BatchLimitError).
var ErrBatchLimit = errors.New("bridge: stream refuses atomic batches of the size the server says it allows")

// BatchLimitError is the failure ErrBatchLimit names: the stream, the batch
// limit its server reported and the size of the batch it refused.
type BatchLimitError struct {
	Stream string
	Limit  int // the server's limit as the bridge learned it
	Size   int // the messages of the refused batch
	Err    error
}

func (e *BatchLimitError) Error() string {
	return fmt.Sprintf("bridge: stream %q refused an atomic batch of %d messages as too large, after its server reported a limit of %d (max_batch_size): %v", e.Stream, e.Size, e.Limit, e.Err)
}

func (e *BatchLimitError) Unwrap() []error { return []error{ErrBatchLimit, e.Err} }

// atomicBatches is the AtomicBatch mode: each step's records stream into
// atomic batches as the gate delivers them, and settle commits the last.
type atomicBatches struct {
	p       *publisher
	batch   []*nats.Msg // the step's messages in delivered order
	staging *openBatch  // the batch being streamed
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

// probeLimit learns the batch limit of the stream's server, which no API
// reports, from how it answers a message of a batch it does not know: a
// batch sequence above its limit is refused as too large (10199), one at
// or below it as an incomplete batch (10176), and neither is stored (a
// batch starts only at sequence 1). It searches the sequences 2 to
// maxProbedBatch+1 on subject, one request each (about 14).
func (x *atomicBatches) probeLimit(ctx context.Context, subject string) (int, error) {
	p := x.p
	tooLarge := func(seq int) (bool, error) {
		h := nats.Header{}
		h.Set(jetstreamext.BatchIDHeader, newBatchID(p.nc))
		h.Set(jetstreamext.BatchSeqHeader, strconv.Itoa(seq))
		actx, cancel := context.WithTimeout(ctx, p.cfg.AckTimeout)
		defer cancel()
		resp, err := p.nc.RequestMsgWithContext(actx, &nats.Msg{Subject: subject, Header: h})
		if err != nil {
			return false, err
		}
		var r struct {
			Error *jetstream.APIError `json:"error"`
		}
		if err := json.Unmarshal(resp.Data, &r); err != nil {
			return false, fmt.Errorf("undecodable answer %q: %w", resp.Data, err)
		}
		switch {
		case r.Error != nil && r.Error.ErrorCode == jetstreamext.JSErrCodeBatchPublishExceedsLimit:
			return true, nil
		case r.Error != nil && r.Error.ErrorCode == jetstreamext.JSErrCodeBatchPublishIncomplete:
			return false, nil
		case r.Error != nil:
			return false, r.Error
		}
		return false, fmt.Errorf("unexpected answer %q", resp.Data)
	}
	// The limit is the largest n in [1, maxProbedBatch] with sequence n
	// not too large, or maxProbedBatch; sequence 1 needs no probe.
	lo, hi := 1, maxProbedBatch+1 // lo is allowed; hi is too large or past the cap
	for hi-lo > 1 {
		mid := lo + (hi-lo)/2
		large, err := tooLarge(mid)
		if err != nil {
			return 0, err
		}
		if large {
			hi = mid
		} else {
			lo = mid
		}
	}
	return lo, nil
}

// learnLimit sets x.limit, from probeLimit (or the publisher's test
// probe), on subject; a failure is kept in p.failed.
func (x *atomicBatches) learnLimit(ctx context.Context, subject string) {
	p := x.p
	probe := p.probe
	if probe == nil {
		probe = x.probeLimit
	}
	limit, err := probe(ctx, subject)
	if err != nil {
		p.failed = fmt.Errorf("bridge: learn the atomic batch limit of stream %q on %q: %w", p.stream, subject, err)
		return
	}
	x.limit = limit
	if limit < maxBatch {
		p.log.Warn("bridge: the stream's server takes smaller atomic batches than JetStream's default; publishing steps as batches of its limit", "stream", p.stream, "max_batch_size", limit)
	} else {
		p.log.Debug("bridge: learned the atomic batch limit", "stream", p.stream, "limit", limit)
	}
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
// x.limit, learned before the publisher's first batch. A failure of NATS is
// kept in p.failed for Settle; once set, nothing more is sent.
//
// Nothing of an open batch is stored before its commit (the stream stages
// it aside), and the stream abandons a batch whose sequence has a gap, so a
// connection that breaks in the middle leaves nothing: every batch is
// stored whole, in order, or not at all. A step longer than x.limit
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
		if x.limit == 0 {
			x.learnLimit(ctx, x.batch[i].Subject)
			if p.failed != nil {
				p.m.inFlight.Dec()
				return
			}
		}
		pub, err := jetstreamext.NewBatchPublisher(p.js, jetstreamext.BatchFlowControl{AckFirst: false, AckTimeout: p.cfg.AckTimeout})
		if err != nil {
			p.m.inFlight.Dec()
			p.failed = fmt.Errorf("bridge: open batch at %s: %w", p.step[i].coord, err)
			return
		}
		b = &openBatch{pub: pub, start: i, subject: x.batch[i].Subject, opened: time.Now()}
		x.staging = b // the record is held back
	} else if err := x.sendHeld(b); err != nil {
		p.failed = err
		x.dropOpen()
		return
	}
	if i-b.start+1 >= x.limit {
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
	}
	if err != nil {
		p.m.failures.Add(float64(n))
		p.failed = fmt.Errorf("bridge: publish batch %s..%s (%d records): %w", first, last, n, err)
		return
	}
	x.refused = false
	// The batch is stored contiguously in order, ending at ack.Sequence.
	for i := start; i < end; i++ {
		p.step[i].seq = ack.Sequence - uint64(end-1-i)
	}
	p.m.latency.Observe(time.Since(b.opened).Seconds())
	p.m.published.Add(float64(n))
}

// refuse accounts for a batch of n messages the server refused as too
// large (err): its limit was lowered since the bridge learned it. The
// first time, the bridge learns it again before the next batch and the
// step is retried (p.failed); a second refusal at the limit learned since
// is permanent, and the step fails with a *BatchLimitError (p.permanent),
// which stops a bridge instead of retrying a batch the server never takes.
func (x *atomicBatches) refuse(n int, err error) {
	p := x.p
	if x.refused {
		p.permanent = &BatchLimitError{Stream: p.stream, Limit: x.limit, Size: n, Err: err}
		p.failed = p.permanent
		return
	}
	p.log.Warn("bridge: the stream's server refused an atomic batch as too large; learning its limit again", "stream", p.stream, "records", n, "limit", x.limit)
	x.refused, x.limit = true, 0
	p.failed = err
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
