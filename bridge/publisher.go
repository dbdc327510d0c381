package bridge

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/stage"
)

// NATS header names the bridge sets.
const (
	HeaderMsgID         = "Nats-Msg-Id"
	HeaderCoordinate    = "Parsley-Coordinate"
	HeaderKey           = "Parsley-Key"
	HeaderTimestamp     = "Parsley-Timestamp"
	HeaderTombstone     = "Parsley-Tombstone"
	HeaderBase64Headers = "Parsley-Base64-Headers"
)

// errConnChanged: the NATS connection dropped or was replaced during the
// step. Publishing on would let a record through on the new connection
// while an earlier one was lost with the old.
var errConnChanged = errors.New("bridge: NATS connection changed during the step")

// publisher is the bridge's stage.External: the handlers hand it delivered
// records in delivered order. In batch mode it collects their messages
// and Settle publishes them as atomic batches (batch.go); in per-message
// mode it publishes each at once and Settle waits for the
// acknowledgements. Only the stage's step goroutine calls publish, Begin
// and Settle; the connection callbacks touch conn only.
type publisher struct {
	cfg     SinkConfig // with defaults applied
	js      jetstream.JetStream
	nc      *nats.Conn
	stream  string
	filters []string
	subject SubjectFunc
	max     int
	m       *metrics
	log     *slog.Logger
	conn    atomic.Uint64 // connection changes seen

	ctx     context.Context // the step's
	epoch   uint64          // conn at Begin
	pending []inflight
	bySubj  map[string]int // publishes in flight per subject
	step    []storedRecord // the step's records in delivered order; seq 0 until acknowledged
	batch   []*nats.Msg    // in batch mode, the step's messages in delivered order
	staging *openBatch     // in batch mode, the batch being streamed (batch.go)
	atomic  bool           // publish each step as atomic batches (batch.go)
	failed  error

	// FastBatch mode (fastbatch.go).
	fastMode    bool
	fast        *fastBatch // the fast batch being streamed
	fastFlow    uint64     // the acknowledgement interval to ask for (fastFlow; tests lower it)
	fastStalls  int        // times sending waited for the stream's acknowledgements
	fastInbox   string     // prefix of its reply subjects
	fastAnswers chan *nats.Msg
	fastSub     *nats.Subscription
}

type inflight struct {
	f     jetstream.PubAckFuture
	subj  string
	rec   int // index in step
	start time.Time
}

func (p *publisher) connChanged() { p.conn.Add(1) }

// Begin implements stage.External: it waits out what an aborted step left
// in flight (each resolves within the ack timeout) and starts afresh.
func (p *publisher) Begin(ctx context.Context) {
	p.ctx = ctx
	for len(p.pending) > 0 && ctx.Err() == nil {
		p.waitOldest(ctx)
	}
	// With ctx ended the step will not settle; forget what is still in
	// flight rather than spin until it resolves.
	for _, in := range p.pending {
		p.m.inFlight.Dec()
		if p.bySubj[in.subj]--; p.bySubj[in.subj] <= 0 {
			delete(p.bySubj, in.subj)
		}
	}
	p.pending = p.pending[:0]
	p.dropOpen()
	p.failed = nil
	p.step = p.step[:0]
	clear(p.batch)
	p.batch = p.batch[:0]
	p.epoch = p.conn.Load()
	if p.bySubj == nil {
		p.bySubj = make(map[string]int)
	}
}

// Settle implements stage.External.
func (p *publisher) Settle(ctx context.Context) error {
	// If ctx ends first, the next Begin accounts for the rest.
	for len(p.pending) > 0 && ctx.Err() == nil {
		p.waitOldest(ctx)
	}
	if len(p.pending) > 0 && p.failed == nil {
		p.failed = fmt.Errorf("bridge: publish of %s to %q: %w", p.step[p.pending[0].rec].coord, p.pending[0].subj, ctx.Err())
	}
	if p.atomic && p.failed == nil && p.staging != nil {
		p.commitOpen(ctx)
	}
	if p.fastMode && p.failed == nil && p.fast != nil {
		p.commitFast(ctx)
	}
	p.dropOpen() // what a failure left open
	p.checkCausalOrder()
	if p.failed != nil {
		p.m.retries.Inc()
	}
	return p.failed
}

// checkCausalOrder reports each record of the step that JetStream stored
// after a record claiming it as a cause (see causalInversions): possible
// when an earlier attempt of the step stored an effect and lost its
// cause, with MaxInFlight above 1 and a broken connection.
func (p *publisher) checkCausalOrder() {
	for _, inv := range causalInversions(p.step) {
		p.m.orderViolations.Inc()
		p.log.Error("bridge: a cause is stored after its effect", "cause", inv.cause.coord.String(), "cause_sequence", inv.cause.seq, "effect", inv.effect.coord.String(), "effect_sequence", inv.effect.seq)
	}
}

// waitOldest waits for the oldest publish in flight and accounts for it.
func (p *publisher) waitOldest(ctx context.Context) {
	in := p.pending[0]
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
		// the ack timeout, and the next Begin drains it.
		if p.failed == nil {
			p.failed = fmt.Errorf("bridge: publish of %s to %q: %w", p.step[in.rec].coord, in.subj, ctx.Err())
		}
		return
	}
	p.pending = p.pending[1:]
	if p.bySubj[in.subj]--; p.bySubj[in.subj] <= 0 {
		delete(p.bySubj, in.subj)
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

// publish hands one delivered record to JetStream. An error is a problem
// with the record itself (its subject or headers), which recurs on every
// retry: it fails the step. A failure of NATS is kept for Settle.
func (p *publisher) publish(m *stage.Message[[]byte, []byte]) error {
	subj, err := p.subject(m.Topic, m.Partition, keyBytes(m))
	if err != nil {
		return fmt.Errorf("%w: subject mapping: %w", ErrNoStream, err)
	}
	if err := checkSubject(subj); err != nil {
		return fmt.Errorf("%w: %w", ErrNoStream, err)
	}
	if !slices.ContainsFunc(p.filters, func(f string) bool { return subjectMatches(f, subj) }) {
		return fmt.Errorf("%w: subject %q is not captured by stream %q (subjects %q)", ErrNoStream, subj, p.stream, p.filters)
	}
	msg, err := message(subj, m)
	if err == nil {
		injectTrace(p.cfg.Propagator, m, msg.Header)
	}
	if err != nil {
		return err
	}
	if p.atomic {
		msg.Header.Set(jetstream.ExpectedStreamHeader, p.stream)
		p.step = append(p.step, storedRecord{coord: m.Coordinate, headers: m.Headers})
		p.batch = append(p.batch, msg)
		p.stageRecord(p.ctx)
		return nil
	}
	if p.fastMode {
		msg.Header.Set(jetstream.ExpectedStreamHeader, p.stream)
		p.step = append(p.step, storedRecord{coord: m.Coordinate, headers: m.Headers})
		p.sendFast(p.ctx, msg)
		return nil
	}
	coord := m.Coordinate // formatted only if an error names it
	for p.failed == nil && len(p.pending) > 0 && (len(p.pending) >= p.max || p.bySubj[subj] > 0) {
		p.waitOldest(p.ctx)
	}
	if p.failed != nil {
		return nil // the step aborts at Settle; publish nothing more
	}
	if p.conn.Load() != p.epoch || !p.nc.IsConnected() {
		p.failed = fmt.Errorf("bridge: publish of %s: %w", coord, errConnChanged)
		return nil
	}
	start := time.Now()
	f, err := p.js.PublishMsgAsync(msg, jetstream.WithRetryAttempts(0), jetstream.WithExpectStream(p.stream))
	if err != nil {
		p.m.failures.Inc()
		p.failed = fmt.Errorf("bridge: publish of %s to %q: %w", coord, subj, err)
		return nil
	}
	p.step = append(p.step, storedRecord{coord: m.Coordinate, headers: m.Headers})
	p.pending = append(p.pending, inflight{f: f, subj: subj, rec: len(p.step) - 1, start: start})
	p.bySubj[subj]++
	p.m.inFlight.Inc()
	return nil
}

func keyBytes(m *stage.Message[[]byte, []byte]) []byte {
	if m.KeyIsNil {
		return nil
	}
	if m.Key == nil {
		return []byte{}
	}
	return m.Key
}

// message builds the NATS message of a delivered record.
func message(subj string, m *stage.Message[[]byte, []byte]) (*nats.Msg, error) {
	h := make(nats.Header, len(m.Headers)+5)
	h.Set(HeaderMsgID, m.Coordinate.String())
	h.Set(HeaderCoordinate, m.Topic+"/"+strconv.FormatInt(int64(m.Partition), 10)+"@"+strconv.FormatInt(m.Offset, 10))
	h.Set(HeaderTimestamp, strconv.FormatInt(m.Timestamp.UnixMilli(), 10))
	if !m.KeyIsNil {
		h.Set(HeaderKey, base64.StdEncoding.EncodeToString(m.Key))
	}
	if m.ValueIsNil {
		h.Set(HeaderTombstone, "true")
	}
	var encoded []string
	for _, kh := range m.Headers {
		if err := checkHeaderName(kh.Key); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrHeader, m.Coordinate, err)
		}
		switch {
		case headers.IsReserved(kh.Key):
			h.Add(kh.Key, base64.StdEncoding.EncodeToString(kh.Value))
		case isText(kh.Value):
			h.Add(kh.Key, string(kh.Value))
		default:
			h.Add(kh.Key, base64.StdEncoding.EncodeToString(kh.Value))
			if !slices.Contains(encoded, kh.Key) {
				encoded = append(encoded, kh.Key)
			}
		}
	}
	if len(encoded) > 0 {
		h.Set(HeaderBase64Headers, strings.Join(encoded, ","))
	}
	return &nats.Msg{Subject: subj, Data: m.Value, Header: h}, nil
}

// checkHeaderName refuses names NATS headers cannot carry (anything but
// printable ASCII without ':') and names NATS and the bridge reserve.
func checkHeaderName(k string) error {
	if k == "" {
		return errors.New("empty header name")
	}
	for _, c := range []byte(k) {
		if c <= ' ' || c >= 0x7f || c == ':' {
			return fmt.Errorf("header name %q has character %q", k, c)
		}
	}
	lk := strings.ToLower(k)
	if strings.HasPrefix(lk, "nats-") || strings.HasPrefix(lk, "parsley-") {
		return fmt.Errorf("header name %q is reserved for NATS and the bridge", k)
	}
	return nil
}

// isText reports whether a header value survives a NATS header as it is:
// UTF-8 without control characters or surrounding spaces.
func isText(v []byte) bool {
	if !utf8.Valid(v) {
		return false
	}
	for _, c := range v {
		if c < ' ' || c == 0x7f {
			return false
		}
	}
	return len(v) == 0 || v[0] != ' ' && v[len(v)-1] != ' '
}
