package bridge

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync/atomic"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/parsley-go/parsley/internal/kclient"
	"github.com/parsley-go/parsley/stage"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ChangelogTopic returns the name of the bridge's changelog topic: the
// stage runtime's, for Config.ApplicationID and Config.Name.
func ChangelogTopic(applicationID, name string) string {
	return stage.ChangelogTopic(applicationID, name)
}

// Run runs a bridge until ctx ends: New, then Bridge.Run.
func Run(ctx context.Context, cfg Config) error {
	b, err := New(cfg)
	if err != nil {
		return err
	}
	return b.Run(ctx)
}

// Bridge is a configured bridge: a stage whose sink is a JetStream stream.
// Its methods other than Run are safe to call while Run runs; they read
// what the stage runtime publishes after every step.
type Bridge struct {
	cfg     Config
	pub     *publisher
	app     *stage.App
	running atomic.Bool
}

// New validates cfg and returns a bridge ready to Run. It does no I/O.
func New(cfg Config) (*Bridge, error) { return newBridge(cfg, nil) }

// newBridge is New with the stage's external sink chosen by external
// (the publisher itself when nil): tests observe steps through it.
func newBridge(cfg Config, external func(*publisher) stage.External) (*Bridge, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return nil, err
	}
	b := &Bridge{cfg: c, pub: newPublisher(c.SinkConfig, newMetrics(c.Stream))}
	var x stage.External = b.pub
	if external != nil {
		x = external(b.pub)
	}
	bld := stage.Named(c.Name)
	for _, t := range c.Topics {
		forward(bld, stage.NewTopic(t, stage.Bytes(), stage.Bytes()), b.pub, x)
	}
	st, err := bld.Build()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	b.app, err = stage.New(stage.Config{
		ApplicationID:      c.ApplicationID,
		InstanceID:         c.InstanceID,
		LeaveOnShutdown:    c.LeaveOnShutdown,
		Brokers:            c.Brokers,
		StateDir:           c.StateDir,
		OnStepError:        stage.StopOnError,
		RetryBackoff:       c.RetryBackoff,
		MaxPollRecords:     c.MaxPollRecords,
		CommitInterval:     c.CommitInterval,
		MaxStepRecords:     c.MaxStepRecords,
		PollInterval:       c.PollInterval,
		SessionTimeout:     c.SessionTimeout,
		RebalanceTimeout:   c.RebalanceTimeout,
		TransactionTimeout: c.TransactionTimeout,
		ClientOpts:         c.ClientOpts,
		Logger:             c.Logger,
		TracerProvider:     c.TracerProvider,
		Propagator:         c.Propagator,
	}, st)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return b, nil
}

// Run connects to NATS, checks the stream against the configuration, and
// forwards records until ctx ends; then it finishes or aborts the current
// step and returns nil. It returns an error when a startup check fails, or
// when a record cannot be forwarded (a corrupt stamp, a subject the stream
// does not capture, a header NATS cannot carry): a *stage.StepError naming
// the record's topic, partition and offset. A NATS outage is not an error:
// the bridge retries with backoff until NATS is back. Run may be called
// once.
func (b *Bridge) Run(ctx context.Context) error {
	if !b.running.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: Bridge.Run called twice", ErrInvalidConfig)
	}
	opened, err := b.pub.open(ctx)
	if err != nil || !opened {
		return err
	}
	defer b.pub.close()
	if err := b.checkSubjects(ctx, b.pub.js, b.pub.filters); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := b.app.Run(ctx); err != nil {
		return fmt.Errorf("bridge: %w", err)
	}
	return nil
}

// checkSubjects refuses a subject mapping that sends a partition of a
// source topic (probed with key "k") to a subject that is invalid, in no
// stream, or in another stream than the configured one. A NATS outage
// during the lookups is waited out, as at startup.
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
			var name string
			err = retryNATS(ctx, c.SinkConfig, js.Conn(), "look up the stream of subject "+subj, func() (err error) {
				name, err = js.StreamNameBySubject(ctx, subj)
				return err
			})
			switch {
			case errors.Is(err, jetstream.ErrStreamNotFound) || err == nil && name != c.Stream:
				errs = append(errs, fmt.Errorf("%w: topic %q partition %d maps to subject %q, which stream %q (subjects %q) does not capture", ErrNoStream, t, p, subj, c.Stream, filters))
			case err != nil:
				return nil // ctx ended
			}
		}
	}
	return errors.Join(errs...)
}

// partitions returns the partition count of each source topic that
// exists; the stage runtime reports missing ones.
func (b *Bridge) partitions(ctx context.Context) (map[string]int32, error) {
	// The stage runtime's failover defaults (internal/kclient), which the
	// user's ClientOpts override, and its seed list without a broker that
	// refuses connections (kclient.Seeds), as for the stage's own clients.
	opts := append([]kgo.Opt{kgo.SeedBrokers(b.cfg.Brokers...)}, kclient.Opts()...)
	cl, err := kclient.NewClient(append(opts, b.cfg.ClientOpts...)...)
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

// Ready reports whether the bridge is processing: Run is running, the
// bridge joined its group, and every task it was assigned restored its
// store and built its causal gate. It turns false again while the bridge
// rejoins after a client failure and once Run returned (see
// stage.App.Readiness).
func (b *Bridge) Ready() bool {
	ok, _ := b.app.Readiness()
	return ok
}

// CommittedSteps returns how many steps this bridge committed.
func (b *Bridge) CommittedSteps() int64 { return b.app.CommittedSteps() }

// Tasks returns the tasks this bridge instance runs (one per source
// partition number it was assigned), sorted, with the records each holds
// at its gate.
func (b *Bridge) Tasks() []stage.TaskInfo { return b.app.Tasks() }

// ExplainHolds returns one entry per record held at a gate of this
// instance, longest held first, with the causes it waits for (see
// stage.App.ExplainHolds).
func (b *Bridge) ExplainHolds() []stage.HeldRecord { return b.app.ExplainHolds() }

// HealthHandler returns the stage runtime's /livez and /readyz handler
// (see stage.App.HealthHandler).
func (b *Bridge) HealthHandler() http.Handler { return b.app.HealthHandler() }

// Collector returns a Prometheus collector of the bridge's metrics: the
// publisher's (parsley_bridge_*, labelled with the stream) and the stage
// runtime's. Register it once with the registry you serve:
//
//	reg.MustRegister(b.Collector())
func (b *Bridge) Collector() prometheus.Collector {
	return collectors{b.pub.m, b.app.Collector()}
}
