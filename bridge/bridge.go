package bridge

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"

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
	s, err := openSink(ctx, c.sink(), b.m)
	if err != nil || s == nil {
		return err
	}
	defer s.Close()
	s.p.afterSettled = b.afterSettled
	b.pub = s.p
	if err := b.checkSubjects(ctx, s.p.js, s.p.filters); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	bld := stage.Named(c.Name)
	for _, t := range c.Topics {
		Forward(bld, stage.NewTopic(t, stage.Bytes(), stage.Bytes()), s)
	}
	st, err := bld.Build()
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

// checkSubjects refuses a subject mapping that sends a partition of a
// source topic (probed with key "k") to a subject that is invalid, in no
// stream, or in another stream than the configured one.
func (b *Bridge) checkSubjects(ctx context.Context, js jetstream.JetStream, filters []string) error {
	c := b.cfg
	parts, err := b.partitions(ctx)
	if err != nil {
		return err
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
				return fmt.Errorf("bridge: look up the stream of subject %q: %w", subj, err)
			}
		}
	}
	return errors.Join(errs...)
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
