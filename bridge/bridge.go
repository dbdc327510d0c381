package bridge

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ChangelogTopic returns the name of the bridge's changelog topic: the
// stage runtime's, for application group and stage name.
func ChangelogTopic(group, name string) string { return stage.ChangelogTopic(group, name) }

// Run runs a bridge until ctx ends: New, then Bridge.Run.
func Run(ctx context.Context, cfg Config) error {
	b, err := New(cfg)
	if err != nil {
		return err
	}
	return b.Run(ctx)
}

// Bridge is a configured bridge.
type Bridge struct {
	cfg Config
	m   *metrics
	app atomic.Pointer[stage.App] // set once Run built it
	pub *publisher

	// afterSettled is a test hook (see publisher.afterSettled).
	afterSettled func() error
}

// New validates cfg and returns a bridge ready to Run. It does no I/O but
// registering the metrics with cfg.Registerer.
func New(cfg Config) (*Bridge, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	b := &Bridge{cfg: c, m: newMetrics(c.Stream)}
	if c.Registerer != nil {
		for _, col := range b.m.collectors() {
			if err := c.Registerer.Register(col); err != nil {
				return nil, fmt.Errorf("%w: register metrics: %w", ErrInvalidConfig, err)
			}
		}
	}
	return b, nil
}

// Run connects to NATS, checks the stream against the configuration, and
// forwards records until ctx ends; then it finishes or aborts the current
// step and returns nil. It returns an error when a startup check fails, or
// when a record cannot be forwarded (a corrupt stamp, a subject the stream
// does not capture, a header NATS cannot carry): a *stage.StepError naming
// the record's topic, partition and offset. A NATS outage is not an error:
// the bridge retries with backoff until NATS is back.
func (b *Bridge) Run(ctx context.Context) error {
	c := b.cfg
	p := &publisher{stream: c.Stream, subject: c.Subject, max: c.MaxInFlight, m: b.m, afterSettled: b.afterSettled}
	b.pub = p
	nc, err := b.connect(ctx, p)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(c.MaxInFlight), jetstream.WithPublishAsyncTimeout(c.AckTimeout))
	if err != nil {
		return fmt.Errorf("bridge: jetstream: %w", err)
	}
	p.js, p.nc = js, nc
	if p.filters, err = b.checkStream(ctx, js); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}

	bld := stage.Named(c.Name)
	for _, t := range c.Topics {
		stage.On(bld, stage.NewTopic(t, stage.Bytes(), stage.Bytes()), func(m stage.Message[[]byte, []byte]) ([]stage.Emission, error) {
			return nil, p.publish(&m)
		})
	}
	st, err := bld.IntoExternal(p).Build()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	app, err := stage.New(stage.Config{
		ApplicationID:      c.Group,
		InstanceID:         c.InstanceID,
		Brokers:            c.Brokers,
		StateDir:           c.StateDir,
		OnStepError:        stage.StopOnError,
		RetryBackoff:       c.RetryBackoff,
		MaxPollRecords:     c.MaxPollRecords,
		PollInterval:       c.PollInterval,
		SessionTimeout:     c.SessionTimeout,
		RebalanceTimeout:   c.RebalanceTimeout,
		TransactionTimeout: c.TransactionTimeout,
		ClientOpts:         c.KafkaOpts,
		Logger:             c.Logger,
	}, st)
	if err != nil {
		return fmt.Errorf("bridge: %w", err)
	}
	b.app.Store(app)
	if err := app.Run(ctx); err != nil {
		return fmt.Errorf("bridge: %w", err)
	}
	return nil
}

// connect dials NATS with the bridge's options after the user's. With
// RetryOnFailedConnect the dial succeeds while NATS is down; the startup
// checks then wait for it.
func (b *Bridge) connect(ctx context.Context, p *publisher) (*nats.Conn, error) {
	opts := append([]nats.Option(nil), b.cfg.NATSOptions...)
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
			b.cfg.Logger.Warn("bridge: NATS disconnected", "err", err)
			if userDisc != nil {
				userDisc(nc, err)
			}
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			p.connChanged()
			b.cfg.Logger.Info("bridge: NATS reconnected", "url", nc.ConnectedUrl())
			if userRec != nil {
				userRec(nc)
			}
		}),
	)
	nc, err := nats.Connect(b.cfg.NATSURL, opts...)
	if err != nil {
		return nil, fmt.Errorf("bridge: connect to NATS: %w", err)
	}
	return nc, nil
}

// checkStream waits for NATS, then refuses a missing stream, a duplicate
// window shorter than the redelivery horizon, and a source partition whose
// subject the stream does not capture. It returns the stream's subject
// filters.
func (b *Bridge) checkStream(ctx context.Context, js jetstream.JetStream) ([]string, error) {
	c := b.cfg
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
		if sleep(ctx, backoff) != nil {
			return nil, nil
		}
	}
	if w := info.Config.Duplicates; w < c.RedeliveryHorizon {
		return nil, fmt.Errorf("%w: stream %q keeps message IDs for %v, the redelivery horizon is %v; raise the stream's duplicate_window or lower RedeliveryHorizon", ErrDuplicateWindow, c.Stream, w, c.RedeliveryHorizon)
	}
	filters := info.Config.Subjects
	if len(filters) == 0 {
		filters = []string{c.Stream}
	}
	parts, err := b.partitions(ctx)
	if err != nil {
		return nil, err
	}
	var errs []error
	topics := append([]string(nil), c.Topics...)
	sort.Strings(topics)
	for _, t := range topics {
		for p := range parts[t] {
			subj, err := c.Subject(t, p, []byte("k"))
			if err == nil {
				err = checkSubject(subj)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%w: topic %q partition %d: %w", ErrNoStream, t, p, err))
				continue
			}
			name, err := js.StreamNameBySubject(ctx, subj)
			switch {
			case errors.Is(err, jetstream.ErrStreamNotFound) || err == nil && name != c.Stream:
				errs = append(errs, fmt.Errorf("%w: topic %q partition %d maps to subject %q, which stream %q (subjects %q) does not capture", ErrNoStream, t, p, subj, c.Stream, filters))
			case err != nil:
				return nil, fmt.Errorf("bridge: look up the stream of subject %q: %w", subj, err)
			}
		}
	}
	return filters, errors.Join(errs...)
}

// partitions returns the partition count of each source topic that
// exists; the stage runtime reports missing ones.
func (b *Bridge) partitions(ctx context.Context) (map[string]int32, error) {
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(b.cfg.Brokers...)}, b.cfg.KafkaOpts...)...)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).Metadata(ctx, b.cfg.Topics...)
	if err != nil {
		return nil, fmt.Errorf("bridge: kafka metadata: %w", err)
	}
	out := make(map[string]int32)
	for _, t := range b.cfg.Topics {
		if td, ok := md.Topics[t]; ok && td.Err == nil {
			out[t] = int32(len(td.Partitions))
		}
	}
	return out, nil
}

// Ready reports whether the bridge joined its group and restored its tasks.
func (b *Bridge) Ready() bool {
	app := b.app.Load()
	return app != nil && app.Ready()
}

// CommittedSteps returns how many steps this bridge committed.
func (b *Bridge) CommittedSteps() int64 {
	app := b.app.Load()
	if app == nil {
		return 0
	}
	return app.CommittedSteps()
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
