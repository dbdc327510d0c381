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
// records in delivered order, it turns each into its NATS message and
// hands that to its mode, which gets the step's messages to JetStream
// (mode.go). Only the stage's step goroutine calls publish, Begin and
// Settle, and the mode's methods; the connection callbacks touch conn
// only.
type publisher struct {
	cfg     SinkConfig // with defaults applied
	js      jetstream.JetStream
	nc      *nats.Conn
	stream  string
	filters []string
	subject SubjectFunc
	mode    mode // chosen by open; perMessage until then
	m       *metrics
	log     *slog.Logger
	conn    atomic.Uint64 // connection changes seen

	ctx    context.Context // the step's
	epoch  uint64          // conn at Begin
	step   []storedRecord  // the step's records in delivered order; seq 0 until acknowledged
	failed error           // the step's first NATS failure: Settle returns it
	// permanent is a refusal that recurs on every retry (a
	// *BatchLimitError): publish returns it, failing the next step on its
	// first record instead of retrying it forever.
	permanent error
	// probe, when set (by tests only), replaces the atomic mode's
	// probeLimit.
	probe func(ctx context.Context, subject string) (int, error)
}

func (p *publisher) connChanged() { p.conn.Add(1) }

// connLost reports whether the connection dropped or was replaced since
// the step began, or is down.
func (p *publisher) connLost() bool { return p.conn.Load() != p.epoch || !p.nc.IsConnected() }

// Begin implements stage.External: its mode waits out or gives up what an
// aborted step left, and the step starts afresh.
func (p *publisher) Begin(ctx context.Context) {
	p.ctx = ctx
	p.mode.begin(ctx)
	p.failed = nil
	p.step = p.step[:0]
	p.epoch = p.conn.Load()
}

// Settle implements stage.External.
func (p *publisher) Settle(ctx context.Context) error {
	p.mode.settle(ctx)
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

// publish hands one delivered record to JetStream. An error is a problem
// with the record itself (its subject or headers), which recurs on every
// retry: it fails the step. A failure of NATS is kept for Settle.
func (p *publisher) publish(m *stage.Message[[]byte, []byte]) error {
	if p.permanent != nil {
		return p.permanent
	}
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
	if err != nil {
		return err
	}
	injectTrace(p.cfg.Propagator, m, msg.Header)
	p.mode.send(p.ctx, msg, storedRecord{coord: m.Coordinate, headers: m.Headers})
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
