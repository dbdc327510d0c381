package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/parsley-go/parsley/internal/wait"
	"github.com/parsley-go/parsley/stage"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"
)

// SinkConfig configures a Sink: the NATS side of a bridge, and of a
// Config, which embeds it.
type SinkConfig struct {
	// NATSURL is the NATS server URL list (nats.Connect's first
	// argument). Required.
	NATSURL string
	// NATSOptions are extra nats.go options (credentials, TLS, names).
	// The bridge adds its own after them: unlimited reconnects, no
	// reconnect buffer (a publish during an outage fails rather than
	// waiting in a buffer that could reorder it) and handlers that track
	// connection changes (wrapping yours).
	NATSOptions []nats.Option
	// Stream is the JetStream stream every subject must land in.
	// Required.
	Stream string
	// Subject maps each record to its NATS subject (see Template).
	// Required.
	Subject SubjectFunc
	// Publish selects how steps reach JetStream, one of three modes (see
	// the package doc, "Publish modes"): AtomicBatch (the default; one
	// atomic batch per step, refusing a stream that does not allow atomic
	// publish), PerMessage (record by record, MaxInFlight at a time) or
	// FastBatch (one fast batch per step, for R1 file streams).
	Publish PublishMode
	// RedeliveryHorizon is the longest time between a publish and its
	// redelivery after a crash or an aborted step that the deployment
	// must survive without a duplicate: at least the Kafka transaction
	// timeout plus the time to restart the bridge. Startup refuses a
	// stream whose duplicate window is shorter. Default 2 minutes
	// (JetStream's default window).
	RedeliveryHorizon time.Duration
	// MaxInFlight bounds, in PerMessage mode, the publishes awaiting their
	// acknowledgement (default 1). With 1, every publish waits for the
	// previous one's acknowledgement, and no record is stored before a
	// record delivered ahead of it. Above 1, publishes are pipelined but at
	// most one per subject is in flight, so each subject's order holds
	// under any failure; across subjects a publish lost on a broken
	// connection can be overtaken by a later one of the same window (the
	// bridge then retries the step, and the later record stays ahead of
	// the earlier one in the stream; the order alarm fires if it was an
	// effect of the lost one).
	MaxInFlight int
	// AckTimeout bounds the wait for one acknowledgement (default 5s).
	AckTimeout time.Duration
	// ConnectBackoff is the first pause between attempts to reach NATS at
	// startup (connecting, reading the stream); it doubles with each
	// failed attempt up to 32 times (default 100ms). It is not the pause
	// before a failed step is retried: that is the stage's RetryBackoff
	// (Config.RetryBackoff for a bridge).
	ConnectBackoff time.Duration
	// Logger receives operational messages (nil means slog.Default()).
	Logger *slog.Logger
	// Propagator writes a traced delivery's context (stage.Message.Context)
	// into its NATS message's headers (default: W3C trace context).
	Propagator propagation.TextMapPropagator
}

// Sink is a JetStream stream as the external sink of a stage application
// (see stage.External): declare it on a stage with Forward, and the
// records the stage's gate delivers on the forwarded topics are published
// in delivered order, the step committing only after JetStream
// acknowledged them. It lets one stage forward some topics to NATS and
// process others, with one transaction for both. Run is the same thing as
// a stand-alone service.
type Sink struct {
	p *publisher
}

// NewSink connects to NATS, waiting for it with backoff, and checks the
// stream as Run does (it exists; its duplicate window covers the
// redelivery horizon). Subjects are checked per record, since a sink does
// not know its topics: a subject outside the stream fails the step. It
// returns (nil, ctx.Err()) if ctx ends while NATS is away.
func NewSink(ctx context.Context, cfg SinkConfig) (*Sink, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	p := newPublisher(c, newMetrics(c.Stream))
	opened, err := p.open(ctx)
	if err != nil {
		return nil, err
	}
	if !opened {
		return nil, ctx.Err()
	}
	return &Sink{p: p}, nil
}

// Close closes the sink's NATS connection.
func (s *Sink) Close() { s.p.close() }

// Collector returns a Prometheus collector of the sink's metrics
// (parsley_bridge_*, labelled with the stream). Register it once with the
// registry you serve.
func (s *Sink) Collector() prometheus.Collector { return s.p.m }

// Forward adds t as a source of the stage being built whose records are
// published to the sink as they are delivered, and declares the sink. The
// topic must carry raw bytes (stage.Bytes codecs), so values and headers
// travel unchanged.
func Forward(b *stage.Builder, t *stage.Topic[[]byte, []byte], s *Sink) *stage.Builder {
	return forward(b, t, s.p, s.p)
}

// forward is Forward with the external sink x declared for p's step
// boundaries (p itself but in tests).
func forward(b *stage.Builder, t *stage.Topic[[]byte, []byte], p *publisher, x stage.External) *stage.Builder {
	return stage.On(b, t, func(m stage.Message[[]byte, []byte]) ([]stage.Emission, error) {
		return nil, p.publish(&m)
	}).IntoExternal(x)
}

func (c SinkConfig) withDefaults() SinkConfig {
	if c.RedeliveryHorizon <= 0 {
		c.RedeliveryHorizon = 2 * time.Minute
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 1
	}
	if c.AckTimeout <= 0 {
		c.AckTimeout = 5 * time.Second
	}
	if c.ConnectBackoff <= 0 {
		c.ConnectBackoff = 100 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Propagator == nil {
		c.Propagator = propagation.TraceContext{}
	}
	return c
}

func (c *SinkConfig) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if c.Subject == nil {
		bad("no Subject mapping")
	}
	if c.NATSURL == "" {
		bad("no NATSURL")
	}
	if c.Stream == "" {
		bad("no Stream")
	}
	if c.Publish < AtomicBatch || c.Publish > FastBatch {
		bad("unknown Publish mode %v", c.Publish)
	}
	return errors.Join(errs...)
}

// newPublisher returns a publisher for c (with defaults applied), not yet
// connected.
func newPublisher(c SinkConfig, m *metrics) *publisher {
	p := &publisher{cfg: c, stream: c.Stream, subject: c.Subject, m: m, log: c.Logger}
	p.mode = newPerMessage(p, c.MaxInFlight)
	return p
}

// open connects and checks the stream. It returns false, and nil, when
// ctx ends first.
func (p *publisher) open(ctx context.Context) (bool, error) {
	c := p.cfg
	nc, err := connect(c, p)
	if err != nil {
		return false, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(c.MaxInFlight), jetstream.WithPublishAsyncTimeout(c.AckTimeout))
	if err != nil {
		nc.Close()
		return false, fmt.Errorf("bridge: jetstream: %w", err)
	}
	p.js, p.nc = js, nc
	info, err := checkStream(ctx, c, js)
	if err != nil || info == nil {
		nc.Close()
		return false, err
	}
	p.filters = info.Config.Subjects
	if len(p.filters) == 0 {
		p.filters = []string{c.Stream}
	}
	switch {
	case c.Publish == PerMessage:
	case c.Publish == FastBatch && !info.Config.AllowBatchPublish:
		nc.Close()
		return false, fmt.Errorf("%w: stream %q: set allow_batched on it (StreamConfig.AllowBatchPublish in nats.go; NATS Server 2.14 or later), or choose another Publish mode (AtomicBatch, PerMessage)", ErrFastBatch, c.Stream)
	case c.Publish == FastBatch:
		fb, err := newFastBatches(p)
		if err != nil {
			nc.Close()
			return false, err
		}
		p.mode = fb
	case info.Config.AllowAtomicPublish:
		ab, err := newAtomicBatches(p)
		if err != nil {
			nc.Close()
			return false, err
		}
		p.mode = ab
	case c.Publish == AtomicBatch:
		nc.Close()
		return false, fmt.Errorf("%w: stream %q: set allow_atomic on it (StreamConfig.AllowAtomicPublish in nats.go; NATS Server 2.12 or later), or set Publish to AtomicBatchOrPerMessage or PerMessage to publish record by record", ErrAtomicPublish, c.Stream)
	default:
		c.Logger.Warn("bridge: stream does not allow atomic publish; publishing record by record", "stream", c.Stream, "max_in_flight", c.MaxInFlight)
	}
	return true, nil
}

// close closes the NATS connection open made.
func (p *publisher) close() {
	if p.nc != nil {
		p.nc.Close()
	}
}

// connect dials NATS with the bridge's options after the user's. With
// RetryOnFailedConnect the dial succeeds while NATS is down; the stream
// check then waits for it.
func connect(c SinkConfig, p *publisher) (*nats.Conn, error) {
	opts := append([]nats.Option(nil), c.NATSOptions...)
	opts = append(opts,
		nats.MaxReconnects(-1),
		nats.ReconnectBufSize(-1),
		nats.RetryOnFailedConnect(true),
	)
	var o nats.Options
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return nil, fmt.Errorf("%w: NATSOptions: %w", ErrInvalidConfig, err)
		}
	}
	userDisc, userRec := o.DisconnectedErrCB, o.ReconnectedCB
	opts = append(opts,
		nats.DisconnectErrHandler(func(nc *nats.Conn, err error) {
			p.connChanged()
			c.Logger.Warn("bridge: NATS disconnected", "err", err)
			if userDisc != nil {
				userDisc(nc, err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			p.connChanged()
			c.Logger.Info("bridge: NATS reconnected", "url", nc.ConnectedUrl())
			if userRec != nil {
				userRec(nc)
			}
		}),
	)
	nc, err := nats.Connect(c.NATSURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("bridge: connect to NATS: %w", err)
	}
	return nc, nil
}

// checkStream waits for NATS, then refuses a missing stream and a
// duplicate window shorter than the redelivery horizon. It returns the
// stream's description, or nil when ctx ended first.
func checkStream(ctx context.Context, c SinkConfig, js jetstream.JetStream) (*jetstream.StreamInfo, error) {
	var info *jetstream.StreamInfo
	err := retryNATS(ctx, c, js.Conn(), "look up stream "+c.Stream, func() error {
		s, err := js.Stream(ctx, c.Stream)
		if err == nil {
			info, err = s.Info(ctx)
		}
		return err
	})
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("%w: stream %q does not exist", ErrNoStream, c.Stream)
	}
	if err != nil || info == nil {
		return nil, nil // ctx ended
	}
	if w := info.Config.Duplicates; w < c.RedeliveryHorizon {
		return nil, fmt.Errorf("%w: stream %q keeps message IDs for %v, the redelivery horizon is %v; raise the stream's duplicate_window or lower RedeliveryHorizon", ErrDuplicateWindow, c.Stream, w, c.RedeliveryHorizon)
	}
	return info, nil
}

// retryNATS calls op until it succeeds, fails with
// jetstream.ErrStreamNotFound (returned, as an answer rather than an
// outage), or ctx ends (ctx.Err() returned). Between attempts it logs why
// and waits a backoff that doubles from c.ConnectBackoff up to 32 times it.
// While the connection is down it says NATS is unreachable at c.NATSURL:
// the error op sees then (with nats.go's reconnect buffer off, "outbound
// buffer limit exceeded") names a symptom, not the cause.
func retryNATS(ctx context.Context, c SinkConfig, nc *nats.Conn, what string, op func() error) error {
	for backoff := c.ConnectBackoff; ; backoff = min(2*backoff, 32*c.ConnectBackoff) {
		err := op()
		if err == nil || errors.Is(err, jetstream.ErrStreamNotFound) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !nc.IsConnected() {
			c.Logger.Warn("bridge: NATS unreachable; retrying", "url", redactURLs(c.NATSURL), "status", nc.Status().String(), "op", what, "backoff", backoff)
		} else {
			c.Logger.Warn("bridge: NATS request failed; retrying", "url", redactURLs(c.NATSURL), "op", what, "err", err, "backoff", backoff)
		}
		if err := wait.Sleep(ctx, backoff); err != nil {
			return err
		}
	}
}

// redactURLs returns a NATS URL list without credentials, for logs.
func redactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, s := range parts {
		if u, err := url.Parse(strings.TrimSpace(s)); err == nil && u.User != nil {
			u.User = nil
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}
