package bridge

import (
	"errors"
	"fmt"
	"time"

	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kgo"
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

// Config configures a bridge: the Kafka side (a stage named Name in the
// application ApplicationID) and, embedded, the NATS side (SinkConfig,
// whose fields Config promotes: cfg.NATSURL, cfg.Stream, cfg.Logger...).
// Each setting has one field and one meaning; those the bridge passes to
// the stage runtime mean what stage.Config's fields of the same names
// mean, defaults included. Brokers, ApplicationID, InstanceID, StateDir
// and Topics are required, and so are NATSURL, Stream and Subject; every
// other field has the default stated at it.
type Config struct {
	// SinkConfig is the NATS side: the server, the stream, the subject
	// mapping, the publish mode and its bounds, the logger and the trace
	// propagator. Its Logger and Propagator serve the stage runtime too.
	SinkConfig

	// Brokers are the Kafka seed brokers (bootstrap.servers). Required.
	Brokers []string
	// ApplicationID names the bridge in Kafka, as stage.Config.
	// ApplicationID names a stage application: its consumer group, the
	// prefix of its changelog topic and transactional ID, and part of its
	// sender identity. Keep it stable. Required.
	ApplicationID string
	// Name is the bridge's stage name (default "bridge"); with
	// ApplicationID it names the changelog topic,
	// stage.ChangelogTopic(ApplicationID, Name), which must exist,
	// compacted, with as many partitions as the source topics.
	Name string
	// InstanceID names this instance among the bridge's instances: unique
	// and stable across restarts (see stage.Config.InstanceID). It is the
	// instance's static group membership: a stopping bridge does not leave
	// the group, so a restart within the session timeout gets its
	// partitions back with no rebalance, and one that does not come back
	// holds them until the session timeout. Required.
	InstanceID string
	// LeaveOnShutdown makes Run leave the consumer group when its context
	// ends, so the instance's partitions move to the other instances at
	// once instead of after the session timeout (stage.Config.
	// LeaveOnShutdown). Set it when scaling in; leave it unset for
	// restarts and rolling deploys, which then move nothing.
	LeaveOnShutdown bool
	// StateDir holds the instance's SQLite task stores. Required.
	StateDir string
	// Topics are the source topics (required, at least one). They must
	// have equal partition counts: task p forwards partition p of each, in
	// causal order.
	Topics []string

	// RetryBackoff is stage.Config.RetryBackoff: the first pause before a
	// step whose publishes failed is settled again; it doubles with each
	// consecutive failure up to 32 times (default 100ms, not the stage's
	// 1s: a NATS outage is usually short). The pause between attempts to
	// reach NATS at startup is SinkConfig.ConnectBackoff.
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
	// PollInterval (no Kafka property; default 250ms), SessionTimeout
	// (session.timeout.ms), RebalanceTimeout (rebalance.timeout.ms) and
	// TransactionTimeout (transaction.timeout.ms) are passed to the stage
	// runtime, which applies their defaults: for the three Kafka timeouts
	// what ClientOpts set, else franz-go's 45s, 60s and 40s (see
	// stage.Config).
	PollInterval       time.Duration
	SessionTimeout     time.Duration
	RebalanceTimeout   time.Duration
	TransactionTimeout time.Duration
	// ClientOpts are extra franz-go options (see stage.Config.ClientOpts).
	ClientOpts []kgo.Opt

	// TracerProvider turns on OpenTelemetry tracing of the bridge's stage
	// (stage.Config.TracerProvider), and each NATS message carries the
	// trace context of its record's process span in its headers, written
	// by SinkConfig.Propagator (default: W3C trace context, traceparent).
	TracerProvider trace.TracerProvider
}

func (c Config) withDefaults() Config {
	if c.Name == "" {
		c.Name = "bridge"
	}
	if c.RetryBackoff <= 0 {
		c.RetryBackoff = 100 * time.Millisecond
	}
	// MaxPollRecords, CommitInterval and MaxStepRecords pass to the stage
	// as they are: its defaults are the bridge's, kept in one place.
	c.SinkConfig = c.SinkConfig.withDefaults()
	return c
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
	if err := c.SinkConfig.validate(); err != nil {
		errs = append(errs, err)
	}
	// The transaction timeout the stage will run with, its default
	// applied where the stage applies it.
	txn := stage.Config{TransactionTimeout: c.TransactionTimeout, ClientOpts: c.ClientOpts}.WithDefaults().TransactionTimeout
	if c.RedeliveryHorizon < txn {
		bad("RedeliveryHorizon %v is shorter than TransactionTimeout %v: an aborted step is redelivered up to a transaction timeout later", c.RedeliveryHorizon, txn)
	}
	if c.AckTimeout >= txn {
		bad("AckTimeout %v is not below TransactionTimeout %v: a step waiting for acknowledgements would outlive its transaction", c.AckTimeout, txn)
	}
	return errors.Join(errs...)
}
