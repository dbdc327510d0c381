package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/parsley-go/parsley/internal/wait"
	"github.com/parsley-go/parsley/stage"
	"github.com/prometheus/client_golang/prometheus"
)

// SinkConfig configures a Sink: the NATS side of a bridge. The fields
// mean what Config's fields of the same names mean.
type SinkConfig struct {
	NATSURL           string
	NATSOptions       []nats.Option
	Stream            string
	Subject           SubjectFunc
	RedeliveryHorizon time.Duration
	MaxInFlight       int
	AckTimeout        time.Duration
	// RetryBackoff is the first pause between attempts to reach NATS at
	// startup (default 100ms, doubling up to 32 times).
	RetryBackoff time.Duration
	Registerer   prometheus.Registerer
	Logger       *slog.Logger
}

// Sink is a JetStream stream as the external sink of a stage application
// (see stage.External): declare it on a stage with Forward, and the
// records the stage's gate delivers on the forwarded topics are published
// in delivered order, the step committing only after JetStream
// acknowledged them. It lets one stage forward some topics to NATS and
// process others, with one transaction for both. Run is the same thing as
// a stand-alone service.
type Sink struct {
	nc *nats.Conn
	p  *publisher
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
	m := newMetrics(c.Stream)
	if c.Registerer != nil {
		for _, col := range m.collectors() {
			if err := c.Registerer.Register(col); err != nil {
				return nil, fmt.Errorf("%w: register metrics: %w", ErrInvalidConfig, err)
			}
		}
	}
	s, err := openSink(ctx, c, m)
	if s == nil && err == nil {
		err = ctx.Err()
	}
	return s, err
}

// Close closes the sink's NATS connection.
func (s *Sink) Close() { s.nc.Close() }

// Forward adds t as a source of the stage being built whose records are
// published to the sink as they are delivered, and declares the sink. The
// topic must carry raw bytes (stage.Bytes codecs), so values and headers
// travel unchanged.
func Forward(b *stage.Builder, t *stage.Topic[[]byte, []byte], s *Sink) *stage.Builder {
	return stage.On(b, t, func(m stage.Message[[]byte, []byte]) ([]stage.Emission, error) {
		return nil, s.p.publish(&m)
	}).IntoExternal(s.p)
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
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = 100 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
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
	return errors.Join(errs...)
}

// openSink connects and checks the stream. It returns (nil, nil) when
// ctx ends first.
func openSink(ctx context.Context, c SinkConfig, m *metrics) (*Sink, error) {
	p := &publisher{stream: c.Stream, subject: c.Subject, max: c.MaxInFlight, m: m, log: c.Logger}
	nc, err := connect(c, p)
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(c.MaxInFlight), jetstream.WithPublishAsyncTimeout(c.AckTimeout))
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("bridge: jetstream: %w", err)
	}
	p.js, p.nc = js, nc
	p.filters, err = checkStream(ctx, c, js)
	if err != nil || p.filters == nil {
		nc.Close()
		return nil, err
	}
	return &Sink{nc: nc, p: p}, nil
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
// stream's subject filters, or nil when ctx ended first.
func checkStream(ctx context.Context, c SinkConfig, js jetstream.JetStream) ([]string, error) {
	var info *jetstream.StreamInfo
	for backoff := c.RetryBackoff; ; backoff = min(2*backoff, 32*c.RetryBackoff) {
		s, err := js.Stream(ctx, c.Stream)
		if err == nil {
			if info, err = s.Info(ctx); err == nil {
				break
			}
		}
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil, fmt.Errorf("%w: stream %q does not exist", ErrNoStream, c.Stream)
		}
		if ctx.Err() != nil {
			return nil, nil
		}
		c.Logger.Warn("bridge: NATS not answering; retrying", "err", err, "backoff", backoff)
		if wait.Sleep(ctx, backoff) != nil {
			return nil, nil
		}
	}
	if w := info.Config.Duplicates; w < c.RedeliveryHorizon {
		return nil, fmt.Errorf("%w: stream %q keeps message IDs for %v, the redelivery horizon is %v; raise the stream's duplicate_window or lower RedeliveryHorizon", ErrDuplicateWindow, c.Stream, w, c.RedeliveryHorizon)
	}
	if len(info.Config.Subjects) == 0 {
		return []string{c.Stream}, nil
	}
	return info.Config.Subjects, nil
}
