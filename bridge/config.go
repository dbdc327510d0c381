package bridge

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

var (
	// ErrInvalidConfig: the Config cannot run.
	ErrInvalidConfig = errors.New("bridge: invalid configuration")
	// ErrDuplicateWindow: the stream's duplicate window is shorter than
	// the redelivery horizon, so a record republished after a crash could
	// be stored twice.
	ErrDuplicateWindow = errors.New("bridge: stream duplicate window shorter than the redelivery horizon")
	// ErrNoStream: the subject mapping sends records to a subject the
	// configured stream does not capture, or the stream does not exist.
	ErrNoStream = errors.New("bridge: subject hits no stream")
	// ErrHeader: a Kafka header cannot be carried as a NATS header (its
	// name is not a valid NATS header name).
	ErrHeader = errors.New("bridge: header cannot be forwarded")
)

// Config configures a bridge.
type Config struct {
	// Brokers are the Kafka seed brokers.
	Brokers []string
	// Group names the bridge in Kafka: its consumer group, the prefix of
	// its changelog topic and transactional ID, and part of its sender
	// identity. Keep it stable.
	Group string
	// Name is the bridge's stage name (default "bridge"); with Group it
	// names the changelog topic, ChangelogTopic(Group, Name), which must
	// exist, compacted, with as many partitions as the source topics.
	Name string
	// InstanceID names this instance among the bridge's instances: unique
	// and stable across restarts (see stage.Config.InstanceID). It is the
	// instance's static group membership: a stopping bridge does not leave
	// the group, so a restart within the session timeout gets its
	// partitions back with no rebalance, and one that does not come back
	// holds them until the session timeout.
	InstanceID string
	// LeaveOnShutdown makes Run leave the consumer group when its context
	// ends, so the instance's partitions move to the other instances at
	// once instead of after the session timeout (stage.Config.
	// LeaveOnShutdown). Set it when scaling in; leave it unset for
	// restarts and rolling deploys, which then move nothing.
	LeaveOnShutdown bool
	// StateDir holds the instance's SQLite task stores.
	StateDir string
	// Topics are the source topics. They must have equal partition
	// counts: task p forwards partition p of each, in causal order.
	Topics []string

	// Subject maps each record to its NATS subject (see Template).
	Subject SubjectFunc

	// NATSURL is the NATS server URL list (nats.Connect's first argument).
	NATSURL string
	// NATSOptions are extra nats.go options (credentials, TLS, names).
	// The bridge adds its own after them: unlimited reconnects, no
	// reconnect buffer (a publish during an outage fails rather than
	// waiting in a buffer that could reorder it) and handlers that track
	// connection changes (wrapping yours).
	NATSOptions []nats.Option
	// Stream is the JetStream stream every subject must land in.
	Stream string

	// RedeliveryHorizon is the longest time between a publish and its
	// redelivery after a crash or an aborted step that the deployment
	// must survive without a duplicate: at least the Kafka transaction
	// timeout plus the time to restart the bridge. Startup refuses a
	// stream whose duplicate window is shorter. Default 2 minutes
	// (JetStream's default window).
	RedeliveryHorizon time.Duration
	// Publish selects how steps reach JetStream, one of three modes (see
	// the package doc, "Publish modes"): AtomicBatch (the default; one
	// atomic batch per step, refusing a stream that does not allow atomic
	// publish), PerMessage (record by record, MaxInFlight at a time) or
	// FastBatch (one fast batch per step, for R1 file streams).
	Publish PublishMode
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

	// RetryBackoff is the first pause before a step whose publishes failed
	// is retried; it doubles with each consecutive failure up to 32 times
	// (default 100ms).
	RetryBackoff time.Duration
	// MaxPollRecords bounds the records of one poll (default 500, as
	// stage.Config.MaxPollRecords). A step spans several polls
	// (CommitInterval, MaxStepRecords): the poll size is only how much
	// the step takes from the client at a time.
	MaxPollRecords int
	// CommitInterval is how long a step goes on polling and publishing
	// before it commits (default 100ms, as stage.Config.CommitInterval).
	// A step commits at once when a poll finds nothing more already
	// fetched, so under light load it adds no latency. A step's records
	// are published as atomic batches of at most the stream server's
	// batch limit (max_batch_size, 1,000 by default) each, the next
	// opened once the previous one is stored; the Kafka transaction
	// commits once, after the last. Longer steps mean fewer Kafka
	// transactions and, in FastBatch mode, fewer batches.
	CommitInterval time.Duration
	// MaxStepRecords bounds the records one step takes over all its
	// polls (default 10,000, at least MaxPollRecords; as
	// stage.Config.MaxStepRecords): what a step holds in memory and
	// publishes again after an abort. The commit interval bounds a step's
	// polling, not its publishing: in PerMessage mode a step waits for
	// its acknowledgements MaxInFlight at a time, so a step of
	// MaxStepRecords records takes MaxStepRecords/MaxInFlight round trips
	// to NATS, which must stay well inside TransactionTimeout (a step that
	// outlives its transaction is aborted and redone the same way): lower
	// MaxStepRecords for a distant NATS server.
	MaxStepRecords int
	// PollInterval, SessionTimeout, RebalanceTimeout and
	// TransactionTimeout are passed to the stage runtime.
	PollInterval       time.Duration
	SessionTimeout     time.Duration
	RebalanceTimeout   time.Duration
	TransactionTimeout time.Duration
	// ClientOpts are extra franz-go options (see stage.Config.ClientOpts).
	ClientOpts []kgo.Opt

	// Logger receives operational messages (nil means slog.Default()).
	Logger *slog.Logger

	// TracerProvider turns on OpenTelemetry tracing of the bridge's stage
	// (stage.Config.TracerProvider), and each NATS message carries the
	// trace context of its record's process span in its headers, written
	// by Propagator (default: W3C trace context, traceparent).
	TracerProvider trace.TracerProvider
	Propagator     propagation.TextMapPropagator
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = "bridge"
	}
	// MaxPollRecords, CommitInterval and MaxStepRecords pass to the stage
	// as they are: its defaults are the bridge's, kept in one place.
	s := c.sink().withDefaults()
	c.RedeliveryHorizon, c.MaxInFlight, c.AckTimeout, c.RetryBackoff, c.Logger = s.RedeliveryHorizon, s.MaxInFlight, s.AckTimeout, s.RetryBackoff, s.Logger
	return c
}

// sink returns the NATS side of c.
func (c Config) sink() SinkConfig {
	return SinkConfig{
		NATSURL: c.NATSURL, NATSOptions: c.NATSOptions, Stream: c.Stream, Subject: c.Subject, Publish: c.Publish,
		RedeliveryHorizon: c.RedeliveryHorizon, MaxInFlight: c.MaxInFlight, AckTimeout: c.AckTimeout,
		RetryBackoff: c.RetryBackoff, Logger: c.Logger, Propagator: c.Propagator,
	}
}

// validate checks a Config with its defaults applied.
func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if len(c.Topics) == 0 {
		bad("no source Topics")
	}
	sc := c.sink()
	if err := sc.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.TransactionTimeout > 0 && c.RedeliveryHorizon < c.TransactionTimeout {
		bad("RedeliveryHorizon %v is shorter than TransactionTimeout %v: an aborted step is redelivered up to a transaction timeout later", c.RedeliveryHorizon, c.TransactionTimeout)
	}
	if c.TransactionTimeout > 0 && c.AckTimeout >= c.TransactionTimeout {
		bad("AckTimeout %v is not below TransactionTimeout %v: a step waiting for acknowledgements would outlive its transaction", c.AckTimeout, c.TransactionTimeout)
	}
	return errors.Join(errs...)
}
