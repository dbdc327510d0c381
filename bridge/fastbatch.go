package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ErrFastBatch: the configuration asks for fast batches and the stream
// does not allow fast batch publish.
var ErrFastBatch = errors.New("bridge: stream does not allow fast batch publish")

// The fast-batch protocol of NATS Server 2.14 and later (JetStream's "fast
// ingest"): a message belongs to a fast batch when its reply subject is
//
//	<inbox>.<batch ID>.<flow>.<gap mode>.<batch sequence>.<operation>.$FI
//
// The stream stores each message as it arrives and answers on the reply
// subject: a flow acknowledgement ({"type":"ack","seq":n,"msgs":m}: every
// message through batch sequence n is stored or was a duplicate, and the
// next acknowledgement follows m messages later) now and then, and one
// publish acknowledgement when the batch ends, at a commit or at the first
// failure: its count is the batch sequence of the last message processed.
// In gap-fail mode a message that fails, or a batch sequence that skips,
// ends the batch there, so what the stream holds of a batch is always a
// prefix of it in batch order.
//
// The stream answers a duplicate (a record a redo finds stored) in the
// middle of a batch by skipping it without a word; so it does with a
// duplicate first message, after the opening flow acknowledgement. Only
// a first message that also commits is answered like a plain duplicate
// publish, which the bridge never sends: it commits with an end-of-batch
// message. The acknowledgements carry no stream sequence per message.
//
// The bridge speaks the protocol over nats.go itself rather than through
// orbit.go's FastPublisher: it streams the step's records as the gate
// delivers them and commits at Settle, as with atomic batches, and it
// must tell every answer that ends a batch from a commit (see endFast).
const (
	fastSuffix   = ".$FI"
	fastGapFail  = "fail"
	fastOpStart  = 0
	fastOpAppend = 1
	fastOpEOB    = 3 // commit without a message of its own
	// fastFlow is the acknowledgement interval the bridge asks for: the
	// most the stream grants (500), so that a step of up to 1,000 records
	// streams without waiting (0.94-1.02 of the plain loop on an R1 file
	// stream against 0.88-0.94 with orbit.go's 100, docs/performance.md).
	// The stream lowers it, to one while other fast batches are open on
	// it, and ramps it up again. fastOutstanding intervals may be
	// unacknowledged before sending waits, as in orbit.go.
	fastFlow        = 500
	fastOutstanding = 2
	// fastReplies is the capacity of the channel the answers arrive on.
	// Sending drains it, so it holds at most what arrives between two
	// sends; a full channel drops answers, and the step then fails at its
	// ack timeout and is redone.
	fastReplies = 8192
)

// fastBatches is the FastBatch mode: each step's records stream into one
// fast batch as the gate delivers them, stored as they arrive, and settle
// ends it.
type fastBatches struct {
	p           *publisher
	fast        *fastBatch // the fast batch being streamed
	fastFlow    uint64     // the acknowledgement interval to ask for (fastFlow; tests lower it)
	fastStalls  int        // times sending waited for the stream's acknowledgements
	fastMaxLead uint64     // most messages ever sent beyond the stored ones; for tests
	fastInbox   string     // prefix of its reply subjects
	fastAnswers chan *nats.Msg
}

// begin ends the batch an aborted step left open.
func (x *fastBatches) begin(context.Context) {
	if x.fast != nil {
		x.abandonFast()
	}
}

func (x *fastBatches) send(ctx context.Context, msg *nats.Msg, rec storedRecord) {
	p := x.p
	msg.Header.Set(jetstream.ExpectedStreamHeader, p.stream)
	p.step = append(p.step, rec)
	x.sendFast(ctx, msg)
}

// settle commits the open batch, if the step did not fail, and ends what
// a failure left open.
func (x *fastBatches) settle(ctx context.Context) {
	if x.p.failed == nil && x.fast != nil {
		x.commitFast(ctx)
	}
	if x.fast != nil {
		x.abandonFast()
	}
}

// fastBatch is the fast batch a step is streaming: unlike an atomic batch,
// its messages are stored as they arrive.
type fastBatch struct {
	id      string
	reply   string // <inbox>.<id>.<flow>.fail.
	subject string // of its first message, for the end-of-batch commit
	start   int    // index in p.step of its first record
	sent    int    // messages sent: batch sequences 1..sent
	acked   uint64 // batch sequence through which the stream reported them stored
	flow    uint64 // the stream's acknowledgement interval
	open    bool   // a flow acknowledgement arrived: the stream holds the batch open
	end     *fastAnswer
	opened  time.Time
}

// fastAnswer is any answer of the stream to a fast-batch message: a flow
// acknowledgement, a gap or error notice (Type set), or the publish
// acknowledgement that ends the batch (Type empty).
type fastAnswer struct {
	Type      string              `json:"type"`
	Seq       uint64              `json:"seq"`
	Msgs      uint64              `json:"msgs"`
	Stream    string              `json:"stream"`
	Duplicate bool                `json:"duplicate"`
	Count     uint64              `json:"count"`
	Error     *jetstream.APIError `json:"error"`

	batchSeq uint64 // of the message answered, from the reply subject
}

// newFastBatches subscribes to the answers of p's fast batches, on p's
// connection: closing the connection ends the subscription.
func newFastBatches(p *publisher) (*fastBatches, error) {
	x := &fastBatches{p: p, fastFlow: fastFlow, fastInbox: p.nc.NewInbox(), fastAnswers: make(chan *nats.Msg, fastReplies)}
	if _, err := p.nc.ChanSubscribe(x.fastInbox+".>", x.fastAnswers); err != nil {
		return nil, fmt.Errorf("bridge: subscribe to fast batch answers: %w", err)
	}
	return x, nil
}

// sendFast publishes the step's newest record in the open fast batch,
// opening one if none is. A failure of NATS is kept in p.failed for
// Settle; once set, nothing more is sent.
//
// A batch's first message waits for the stream's opening answer (or
// the answer that ends the batch at once: an error, or a duplicate as
// described above); later ones are pipelined, at most fastOutstanding
// flow intervals ahead of the acknowledgements. One connection carries a
// batch's messages in order and the stream stores them in arrival order,
// ending the batch at the first one lost or refused, so what the stream
// holds of a step is a prefix of it in delivered order, plus records
// stored before, which it absorbs by message ID wherever they come.
func (x *fastBatches) sendFast(ctx context.Context, msg *nats.Msg) {
	p := x.p
	if p.failed != nil {
		return
	}
	i := len(p.step) - 1
	coord := p.step[i].coord // formatted only if an error names it
	if p.connLost() {
		p.failed = fmt.Errorf("bridge: publish of %s: %w", coord, errConnChanged)
		return
	}
	b := x.fast
	if b == nil {
		id := newBatchID(p.nc)
		b = &fastBatch{id: id, reply: x.fastInbox + "." + id + "." + strconv.FormatUint(x.fastFlow, 10) + "." + fastGapFail + ".",
			subject: msg.Subject, start: i, flow: x.fastFlow, opened: time.Now()}
	}
	op := fastOpAppend
	if b.sent == 0 {
		op = fastOpStart
	}
	msg.Reply = b.reply + strconv.Itoa(b.sent+1) + "." + strconv.Itoa(op) + fastSuffix
	if err := p.nc.PublishMsg(msg); err != nil {
		p.m.failures.Inc()
		p.failed = fmt.Errorf("bridge: publish of %s to %q: %w", coord, msg.Subject, err)
		return
	}
	x.fast = b
	b.sent++
	if b.sent > 1 && uint64(b.sent)-b.acked > x.fastMaxLead {
		x.fastMaxLead = uint64(b.sent) - b.acked
	}
	p.m.inFlight.Inc()
	if b.sent == 1 {
		x.awaitFirst(ctx, b)
		return
	}
	x.drainFast(b)
	if b.end == nil && uint64(b.sent) >= b.acked+fastOutstanding*b.flow {
		x.fastStalls++
		if !x.awaitFast(ctx, b, func() bool { return uint64(b.sent) < b.acked+fastOutstanding*b.flow }) {
			p.m.failures.Add(float64(b.sent))
			return
		}
	}
	if b.end != nil {
		x.endFast(b) // ended early: a message failed
	}
}

// awaitFirst waits for the answer to a batch's first message.
func (x *fastBatches) awaitFirst(ctx context.Context, b *fastBatch) {
	p := x.p
	if !x.awaitFast(ctx, b, func() bool { return b.open }) {
		p.m.failures.Inc()
		return
	}
	a := b.end
	if a == nil {
		return // open
	}
	x.fast = nil
	p.m.inFlight.Dec()
	if a.Error == nil && a.Duplicate && a.Stream == p.stream {
		// Stored before, and the stream ended the batch with it.
		// nats-server 2.15 answers so only a duplicate first message that
		// also commits, which the bridge does not send; a server that
		// answered every duplicate first message so would otherwise fail
		// every redo. The next record opens a new batch.
		p.step[b.start].seq = a.Seq
		p.m.published.Inc()
		p.m.duplicates.Inc()
		p.m.latency.Observe(time.Since(b.opened).Seconds())
		return
	}
	p.m.failures.Inc()
	p.failed = fmt.Errorf("bridge: publish of %s to %q: %w", p.step[b.start].coord, b.subject, a.err(p.stream))
}

// awaitFast drains answers until done reports true, the batch ends, ctx
// ends or the ack timeout passes; it reports whether done or the end came
// first, and sets p.failed otherwise.
func (x *fastBatches) awaitFast(ctx context.Context, b *fastBatch, done func() bool) bool {
	p := x.p
	timer := time.NewTimer(p.cfg.AckTimeout)
	defer timer.Stop()
	for {
		x.drainFast(b)
		if b.end != nil || done() {
			return true
		}
		select {
		case m := <-x.fastAnswers:
			x.takeFast(b, m)
		case <-timer.C:
			p.failed = fmt.Errorf("bridge: fast batch from %s: %d messages sent, stored through %d: no answer within %v", p.step[b.start].coord, b.sent, b.acked, p.cfg.AckTimeout)
			return false
		case <-ctx.Done():
			p.failed = fmt.Errorf("bridge: fast batch from %s: %w", p.step[b.start].coord, ctx.Err())
			return false
		}
	}
}

// drainFast takes the answers already received.
func (x *fastBatches) drainFast(b *fastBatch) {
	for {
		select {
		case m := <-x.fastAnswers:
			x.takeFast(b, m)
		default:
			return
		}
	}
}

// takeFast accounts for one answer: those to earlier batches (an ended
// or abandoned one's late answers) are dropped.
func (x *fastBatches) takeFast(b *fastBatch, m *nats.Msg) {
	id, seq, ok := parseFastReply(m.Subject, x.fastInbox)
	if !ok || id != b.id || b.end != nil {
		return
	}
	a := &fastAnswer{}
	if err := json.Unmarshal(m.Data, a); err != nil {
		b.end = &fastAnswer{Error: &jetstream.APIError{Description: "undecodable answer: " + err.Error()}, batchSeq: seq}
		return
	}
	a.batchSeq = seq
	switch a.Type {
	case "ack":
		b.open = true
		if a.Msgs > 0 {
			b.flow = a.Msgs
		}
		b.acked = max(b.acked, a.Seq)
	case "gap", "err":
		// Notices; in gap-fail mode the acknowledgement that ends the
		// batch follows and says what was stored.
	default:
		b.end = a
	}
}

// newBatchID returns a batch ID unique across the stream's publishers:
// the random last token of a new inbox (a NUID, 22 characters; the stream
// takes IDs up to 64).
func newBatchID(nc *nats.Conn) string {
	inbox := nc.NewInbox()
	return inbox[strings.LastIndexByte(inbox, '.')+1:]
}

// parseFastReply returns the batch ID and batch sequence of a fast-batch
// reply subject under inbox.
func parseFastReply(subj, inbox string) (id string, seq uint64, ok bool) {
	rest, ok := strings.CutPrefix(subj, inbox+".")
	if !ok {
		return "", 0, false
	}
	rest, ok = strings.CutSuffix(rest, fastSuffix)
	if !ok {
		return "", 0, false
	}
	// <id>.<flow>.<gap>.<seq>.<op>
	parts := strings.Split(rest, ".")
	if len(parts) != 5 {
		return "", 0, false
	}
	seq, err := strconv.ParseUint(parts[3], 10, 64)
	return parts[0], seq, err == nil
}

// commitFast ends the open fast batch and waits for its acknowledgement,
// which must count every message sent: a shorter count means the stream
// ended the batch early and holds only a prefix of it.
func (x *fastBatches) commitFast(ctx context.Context) {
	p := x.p
	b := x.fast
	if b.end == nil {
		if p.connLost() {
			p.failed = fmt.Errorf("bridge: publish fast batch from %s: %w", p.step[b.start].coord, errConnChanged)
			x.abandonFast()
			return
		}
		eob := &nats.Msg{Subject: b.subject, Reply: b.reply + strconv.Itoa(b.sent+1) + "." + strconv.Itoa(fastOpEOB) + fastSuffix}
		if err := p.nc.PublishMsg(eob); err != nil {
			p.m.failures.Add(float64(b.sent))
			p.failed = fmt.Errorf("bridge: commit fast batch from %s: %w", p.step[b.start].coord, err)
			x.abandonFast()
			return
		}
		if !x.awaitFast(ctx, b, func() bool { return false }) {
			p.m.failures.Add(float64(b.sent))
			x.abandonFast()
			return
		}
	}
	x.endFast(b)
}

// endFast accounts for the acknowledgement that ended the open batch.
func (x *fastBatches) endFast(b *fastBatch) {
	p := x.p
	x.fast = nil
	p.m.inFlight.Sub(float64(b.sent))
	a := b.end
	first, last := p.step[b.start].coord.String(), p.step[b.start+b.sent-1].coord.String()
	var err error
	switch {
	case a.Error != nil:
		err = a.err(p.stream)
		if a.batchSeq > 0 && int(a.batchSeq) <= b.sent {
			err = fmt.Errorf("at %s: %w", p.step[b.start+int(a.batchSeq)-1].coord, err)
		}
	case a.Stream != p.stream:
		err = fmt.Errorf("acknowledged by stream %q, not %q", a.Stream, p.stream)
	case a.Count < uint64(b.sent):
		err = fmt.Errorf("the stream ended the batch after %d of %d records, at %s", a.Count, b.sent, p.step[b.start+int(a.Count)].coord)
	case a.Count > uint64(b.sent):
		err = fmt.Errorf("acknowledged %d records, sent %d", a.Count, b.sent)
	}
	if err != nil {
		p.m.failures.Add(float64(b.sent))
		p.failed = fmt.Errorf("bridge: publish fast batch %s..%s (%d records): %w", first, last, b.sent, err)
		return
	}
	// A fast batch's acknowledgement names the stream sequence of its
	// last stored message only (0 when it stored none), and duplicates
	// are skipped without an answer: the records keep sequence 0 and take
	// no part in the order check, and only a batch the stream found
	// stored whole, a step redone after its acknowledgement, counts as
	// duplicates.
	p.m.latency.Observe(time.Since(b.opened).Seconds())
	p.m.published.Add(float64(b.sent))
	if a.Seq == 0 {
		p.m.duplicates.Add(float64(b.sent))
	}
}

// abandonFast ends the open fast batch without waiting for its answer:
// the step failed before its Settle or is being retried. What the stream
// stored of it stays, a prefix of the step in delivered order that the
// redo absorbs by message ID; the end frees the stream's slot for the
// batch now rather than at its timeout (10 seconds by default).
func (x *fastBatches) abandonFast() {
	p := x.p
	b := x.fast
	x.fast = nil
	p.m.inFlight.Sub(float64(b.sent))
	if b.end != nil || !p.nc.IsConnected() {
		return
	}
	eob := &nats.Msg{Subject: b.subject, Reply: b.reply + strconv.Itoa(b.sent+1) + "." + strconv.Itoa(fastOpEOB) + fastSuffix}
	if err := p.nc.PublishMsg(eob); err != nil {
		p.log.Debug("bridge: could not end a fast batch; the stream ends it at its timeout", "batch", b.id, "err", err)
	}
}

// err returns the failure an answer reports.
func (a *fastAnswer) err(stream string) error {
	switch {
	case a.Error != nil:
		return a.Error
	case a.Stream != stream:
		return fmt.Errorf("acknowledged by stream %q, not %q", a.Stream, stream)
	}
	return fmt.Errorf("unexpected answer (sequence %d, count %d, duplicate %v)", a.Seq, a.Count, a.Duplicate)
}
