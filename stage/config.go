package stage

// Configuration: Config, its defaults, and the checks New runs on it.

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"time"

	"github.com/parsley-go/parsley/internal/state"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// ErrorPolicy says what Run does after a step failed (a handler error, a
// panic, a codec failure, a corrupt stamp, an emission to an undeclared
// sink). Either way the step's transaction aborted and nothing it did is
// visible.
type ErrorPolicy int

const (
	// StopOnError stops Run with the *StepError, which names the stage and
	// the record. The default: a deterministic failure recurs on every
	// retry, and a stopped application is loud and recoverable by
	// deploying fixed logic.
	StopOnError ErrorPolicy = iota
	// RetryOnError logs the failure, waits Config.RetryBackoff and
	// processes the same records again from committed state. Suits
	// transient failures (a remote lookup in a codec); a deterministic
	// failure blocks its partition, retrying forever.
	RetryOnError
)

// Config configures an application.
//
// ApplicationID, InstanceID, Brokers and StateDir are required. Every other
// field may be left unset: a zero duration or count means the default
// stated at the field, applied by New in one place (WithDefaults shows the
// result). A negative duration or count is the same as zero, except where a
// field gives it a meaning of its own (DecodeAhead, StateCache and
// HoldWarningAfter: off; Standbys: rejected). A field that sets a Kafka
// client property names it.
type Config struct {
	// ApplicationID names the application: its consumer group (group.id),
	// the prefix of its changelog topics and its transactional IDs, and
	// part of every task's sender identity. Keep it stable. Required.
	ApplicationID string
	// InstanceID names this instance among the application's instances
	// (required). It must be unique and stable across restarts of the same instance: the
	// transactional ID is "<ApplicationID>-<InstanceID>", so a restarted
	// instance fences its previous incarnation and aborts its open
	// transaction at once, instead of waiting for the transaction timeout.
	//
	// It is also the static group instance ID (KIP-345,
	// group.instance.id): an instance that
	// restarts within the session timeout gets its tasks back without a
	// rebalance, and a stopping instance does not leave the group — its
	// tasks wait for it until the session timeout, then move. To stop an
	// instance for good (scale-in), set LeaveOnShutdown.
	InstanceID string
	// LeaveOnShutdown makes Run leave the consumer group when its context
	// ends, so the instance's tasks move to the others at once instead of
	// after the session timeout. Set it when scaling in; leave it unset for
	// restarts and rolling deploys, which then move nothing.
	LeaveOnShutdown bool
	// Brokers are the seed brokers (bootstrap.servers). Required: at least
	// one.
	Brokers []string
	// StateDir is the directory of this instance's task stores (one SQLite
	// file per task). Deleting it loses nothing: stores restore from the
	// changelogs. Required.
	StateDir string
	// Standbys is how many other instances keep a warm copy of each task's
	// store by tailing its changelog (default 0, none), as Kafka Streams'
	// num.standby.replicas. A task that moves to an instance with a copy
	// restores only the changelog tail the copy had not applied. A copy is
	// never kept on the instance that runs the task, and at most one per
	// instance, so more copies than other instances are not placed. Each
	// copy costs its instance a changelog reader and a store file.
	//
	// The group leader places the copies: the count is the largest any
	// member runs with, and instances running with 0 keep none.
	Standbys int

	// OnStepError is the policy after a failed step (default StopOnError).
	OnStepError ErrorPolicy
	// RetryBackoff is the runtime's retry pause (default 1s): before a
	// failed step is retried under RetryOnError, and before a new client is
	// built after a fatal client error. A step whose external sink did not
	// settle waits RetryBackoff, doubling with each consecutive such step
	// up to 32 times; a standby that failed starts again after five times
	// RetryBackoff, at least one second. It sets no Kafka property: the
	// clients' own request retries (retry.backoff.ms) follow the failover
	// defaults (ClientOpts).
	RetryBackoff time.Duration

	// MaxPollRecords bounds the records of one poll (default 500, as
	// Kafka's max.poll.records). A step spans several polls
	// (CommitInterval, MaxStepRecords).
	MaxPollRecords int
	// CommitInterval is how long a step goes on polling before it commits
	// (default 100ms, as Kafka Streams' commit.interval.ms under
	// exactly-once; it sets no client property): a transaction
	// costs the broker a few round trips and much CPU whatever it holds,
	// so a busy step takes many polls into one. A step does not wait for
	// records to arrive: it commits as soon as a poll finds nothing more
	// already fetched, so light load adds no latency. One exception, under
	// a steady flow: a step whose first poll found records already
	// buffered waits up to 5 ms for the fetch that poll sent, which
	// carries what reached the broker while the previous step ran (without
	// it those records would wait out this step too). A revoke, or any
	// change of the assignment, ends the polling at once.
	CommitInterval time.Duration
	// MaxStepRecords bounds the records one step takes over all its polls
	// (default 10,000, at least MaxPollRecords): what a step holds in
	// memory and replays after an abort.
	MaxStepRecords int
	// DecodeAhead is how many goroutines decode the keys and values of a
	// step's fetched records while the step goroutine delivers the records
	// before them (default 1; at most GOMAXPROCS-1 as New finds it, so
	// none on one core).
	// Delivery order is unchanged: decoding is the only per-record work
	// that needs no order, and doing it on another core leaves the step
	// goroutine the gate, the handlers and the sends. A record the workers
	// have not reached when it is delivered is decoded there, as without
	// them. A negative value decodes every record on the step goroutine: for
	// codecs that are not safe for concurrent use (Codec).
	DecodeAhead int
	// StateCache bounds, in bytes, each task's in-memory cache of the
	// committed state it reads from its SQLite file (default 32 MiB; a
	// negative value turns it off). SQLite's own page cache takes a quarter
	// as much again, at least 2 MiB, and the committed steps' writes held
	// in memory until they are written to the file another quarter, at
	// least 1 MiB, so a task's state costs about 1.5 × StateCache of memory
	// beyond what the open step holds, whatever the size of the state on
	// disk. A step reads the state of its records' keys in batched queries
	// before delivering them, into this cache.
	StateCache int64
	// PollInterval bounds how long one poll waits for records before the
	// loop checks for assignment changes and shutdown (default 250ms). It
	// sets no Kafka property (the Java consumer's poll timeout).
	PollInterval time.Duration
	// SessionTimeout is the group session timeout, Kafka's
	// session.timeout.ms (default: what ClientOpts set with
	// kgo.SessionTimeout, else 45s, franz-go's). It must lie within the
	// brokers' group.min.session.timeout.ms and
	// group.max.session.timeout.ms. The heartbeat interval
	// (heartbeat.interval.ms) is a third of it, at most 250ms: on Kafka a
	// member hears of a rebalance only in a heartbeat's answer, and every
	// member's commit waits until the join ends (session.go, maxHeartbeat).
	SessionTimeout time.Duration
	// RebalanceTimeout bounds how long the group waits for members to
	// rejoin in a rebalance, Kafka's rebalance.timeout.ms (default: what
	// ClientOpts set with kgo.RebalanceTimeout, else 60s, franz-go's).
	RebalanceTimeout time.Duration
	// TransactionTimeout is the producer's transaction timeout, Kafka's
	// transaction.timeout.ms (default: what ClientOpts set with
	// kgo.TransactionTimeout, else 40s, franz-go's): the broker aborts a
	// transaction open longer. It must not exceed the brokers'
	// transaction.max.timeout.ms. A step that has not ended after twice
	// this is cancelled and aborted (the step timeout), and a producer ID
	// that cannot be loaded through a transaction coordinator's failover
	// is retried for this long.
	TransactionTimeout time.Duration

	// TruncateInterval is how often each task drops from its stamps the
	// claims below the log start of the topics they name, which keeps stamp
	// width bounded by retention instead of growing with the transitive
	// upstream (default 10m, as in the Java library; also done whenever a
	// task starts). It runs on Config.WallClock; a failed sweep skips its
	// cycle and is counted (docs/metrics.md, "The truncation sweep"). It
	// sets no Kafka property.
	TruncateInterval time.Duration

	// ClientOpts are extra franz-go options for every client the
	// application builds (TLS, SASL, logging, timeouts; default none). A
	// session, rebalance or transaction timeout set here is the default of
	// the Config field of the same name, which overrides it. Options the
	// runtime owns — the consumer group, consumed topics, balancers,
	// transactional ID, partitioner — and options that weaken exactly-once
	// processing (read_uncommitted, non-idempotent writes, acks other than
	// all) are refused with ErrInvalidConfig.
	//
	// They are applied after the runtime's failover defaults, which they
	// override: MetadataMinAge 100ms (franz-go: 5s), a retry backoff of
	// 100ms doubling to 250ms (franz-go: 250ms to 5s), RequestRetries 200
	// (franz-go: 20), and heartbeats retried for at least 30s (franz-go:
	// the session timeout), so that a client follows a leader or
	// coordinator to its new broker as soon as the cluster has moved it,
	// and a member keeps its partitions through its coordinator's
	// failover. clock.ClientOpts offers the same defaults to plain
	// clients; docs/operations.md explains each. They override, too, a
	// FetchMaxWait of 500ms (franz-go: 5s; the Java consumer's default),
	// so that partitions resumed after a restore are fetched within it.
	ClientOpts []kgo.Opt

	// HoldWarningAfter: a record that has gated its channel (been the head
	// of its hold queue) this long is logged once at WARN with its
	// vc-hold-* code. Zero means the default, 30s; a negative duration
	// disables the warning, leaving ExplainHolds and the metrics.
	HoldWarningAfter time.Duration
	// WallClock returns the current time (default time.Now). It schedules
	// ticks and sweeps, stamps tick timestamps, ages holds, and dates the
	// task stores' checkpoints (a store older than its changelog's
	// delete.retention.ms is wiped at restore, state.Restore);
	// stagetest.Driver injects a manual clock so tick timestamps are
	// deterministic. Step latency is measured with the real clock.
	WallClock func() time.Time

	// Logger receives operational messages (default slog.Default()).
	Logger *slog.Logger

	// TracerProvider turns on OpenTelemetry tracing (docs/tracing.md):
	// kotel's publish and receive spans on the application's client, with
	// trace context in record headers, and per delivered record a process
	// span linked to the span that produced the record and, if the gate
	// held it, a hold span from its fetch to its delivery naming the cause
	// it waited for and linked to that cause's producing span. Nil (the
	// default) traces nothing and costs nothing on the step path. Do not
	// also pass kotel's hooks in ClientOpts: the spans would be doubled.
	TracerProvider trace.TracerProvider
	// Propagator carries trace context in record headers when tracing is
	// on (default: W3C trace context, the traceparent header).
	Propagator propagation.TextMapPropagator
}

// franz-go's defaults for the timeouts Config names (kgo.SessionTimeout,
// kgo.RebalanceTimeout, kgo.TransactionTimeout): what a client uses when no
// option sets them. TestKgoDefaults holds them to the client's.
const (
	kgoSessionTimeout     = 45 * time.Second
	kgoRebalanceTimeout   = 60 * time.Second
	kgoTransactionTimeout = 40 * time.Second
)

// WithDefaults returns c with every default applied, as New runs with it:
// each unset field holds the default its documentation states. It does no
// I/O and checks nothing (New does).
func (c Config) WithDefaults() Config { return c.withDefaults() }

// withDefaults is the one place a default is applied: the runtime reads
// every setting from its result and never again tests a field for zero.
func (c *Config) withDefaults() Config {
	d := *c
	if d.RetryBackoff <= 0 {
		d.RetryBackoff = time.Second
	}
	if d.MaxPollRecords <= 0 {
		d.MaxPollRecords = 500
	}
	if d.CommitInterval <= 0 {
		d.CommitInterval = 100 * time.Millisecond
	}
	if d.MaxStepRecords <= 0 {
		d.MaxStepRecords = 10_000
	}
	d.MaxStepRecords = max(d.MaxStepRecords, d.MaxPollRecords)
	switch {
	case d.DecodeAhead == 0:
		d.DecodeAhead = 1
	case d.DecodeAhead < 0:
		d.DecodeAhead = 0
	}
	d.DecodeAhead = max(min(d.DecodeAhead, runtime.GOMAXPROCS(0)-1), 0) // a worker needs a core of its own
	switch {
	case d.StateCache == 0:
		d.StateCache = state.DefaultCacheBytes
	case d.StateCache < 0:
		d.StateCache = 0
	}
	if d.PollInterval <= 0 {
		d.PollInterval = 250 * time.Millisecond
	}
	session, rebalance, txn := clientTimeouts(d.ClientOpts)
	if d.SessionTimeout <= 0 {
		d.SessionTimeout = session
	}
	if d.RebalanceTimeout <= 0 {
		d.RebalanceTimeout = rebalance
	}
	if d.TransactionTimeout <= 0 {
		d.TransactionTimeout = txn
	}
	if d.TruncateInterval <= 0 {
		d.TruncateInterval = 10 * time.Minute
	}
	d.HoldWarningAfter = cmp.Or(d.HoldWarningAfter, 30*time.Second)
	if d.WallClock == nil {
		d.WallClock = time.Now
	}
	d.Logger = cmp.Or(d.Logger, slog.Default())
	if d.Propagator == nil {
		d.Propagator = propagation.TraceContext{}
	}
	return d
}

// clientTimeouts returns the session, rebalance and transaction timeouts a
// client built with opts uses: what opts set, else franz-go's defaults.
// Options a client refuses give the defaults (validate reports them).
func clientTimeouts(opts []kgo.Opt) (session, rebalance, txn time.Duration) {
	session, rebalance, txn = kgoSessionTimeout, kgoRebalanceTimeout, kgoTransactionTimeout
	if len(opts) == 0 {
		return
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return
	}
	defer cl.Close()
	if v, ok := cl.OptValue(kgo.SessionTimeout).(time.Duration); ok && v > 0 {
		session = v
	}
	if v, ok := cl.OptValue(kgo.RebalanceTimeout).(time.Duration); ok && v > 0 {
		rebalance = v
	}
	if v, ok := cl.OptValue(kgo.TransactionTimeout).(time.Duration); ok && v > 0 {
		txn = v
	}
	return
}

func (c *Config) validate(stages []*Stage) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	if err := checkName(c.ApplicationID); err != nil {
		bad("ApplicationID: %v", err)
	} else if c.ApplicationID == "." || c.ApplicationID == ".." {
		bad("ApplicationID %q: it names the application's directory under StateDir", c.ApplicationID)
	}
	if err := checkName(c.InstanceID); err != nil {
		bad("InstanceID: %v", err)
	}
	if len(c.Brokers) == 0 {
		bad("no Brokers")
	}
	if c.StateDir == "" {
		bad("no StateDir")
	}
	if c.Standbys < 0 {
		bad("Standbys %d: the number of standby copies per task cannot be negative", c.Standbys)
	}
	if c.OnStepError != StopOnError && c.OnStepError != RetryOnError {
		bad("unknown OnStepError policy %d", c.OnStepError)
	}
	if len(stages) == 0 {
		bad("no stages")
	}
	names := make(map[string]bool)
	for i, s := range stages {
		if s == nil {
			bad("stage %d is nil (did Build fail?)", i)
			continue
		}
		if names[s.name] {
			bad("two stages named %q", s.name)
		}
		names[s.name] = true
	}
	if err := checkClientOpts(c.ClientOpts); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// checkClientOpts refuses user options the runtime owns or that would
// weaken exactly-once processing. It reads them back from a client that is
// built but never used.
func checkClientOpts(opts []kgo.Opt) error {
	if len(opts) == 0 {
		return nil
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("%w: ClientOpts: %w", ErrInvalidConfig, err)
	}
	defer cl.Close()
	var errs []error
	refuse := func(what string) {
		errs = append(errs, fmt.Errorf("%w: ClientOpts: %s", ErrInvalidConfig, what))
	}
	if weakensIsolation(opts) {
		refuse("read_uncommitted would expose aborted steps; stages read committed only")
	}
	if b, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool); b {
		refuse("DisableIdempotentWrite weakens exactly-once")
	}
	if a, ok := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); ok && a != kgo.AllISRAcks() {
		refuse("RequiredAcks other than all ISR weakens exactly-once")
	}
	if vs := cl.OptValues(kgo.TransactionalID); len(vs) == 2 && vs[1] == true {
		refuse("TransactionalID is derived from ApplicationID and InstanceID")
	}
	if g, _ := cl.OptValue(kgo.ConsumerGroup).(string); g != "" {
		refuse("ConsumerGroup is the ApplicationID")
	}
	if ts, _ := cl.OptValue(kgo.ConsumeTopics).([]string); len(ts) > 0 {
		refuse("ConsumeTopics are the stages' sources")
	}
	if ps, _ := cl.OptValue(kgo.ConsumePartitions).(map[string]map[int32]kgo.Offset); len(ps) > 0 {
		refuse("ConsumePartitions conflicts with the group")
	}
	return errors.Join(errs...)
}

// startsAtLogStart reports whether a client built with opts starts a
// partition its group has no offset for at the log start, as the runtime
// assumes unless ClientOpts say otherwise (ConsumeStartOffset, or a
// ConsumeResetOffset that sets it too): docs/operations.md shows a stage
// joining at the log end.
func startsAtLogStart(opts []kgo.Opt) bool {
	if len(opts) == 0 {
		return true
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return false
	}
	defer cl.Close()
	// franz-go's default start offset, and what ConsumeResetOffset's
	// AtStart sets it to.
	return cl.OptValue(kgo.ConsumeStartOffset) == kgo.NewOffset().AtStart()
}

// weakensIsolation reports whether opts change the isolation level away
// from read_committed. The client's default is read_uncommitted, so the
// value alone cannot tell an explicit weakening from no option: compare a
// read_committed client with one that applies opts after it.
func weakensIsolation(opts []kgo.Opt) bool {
	base, err := kgo.NewClient(kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return true
	}
	defer base.Close()
	with, err := kgo.NewClient(append([]kgo.Opt{kgo.FetchIsolationLevel(kgo.ReadCommitted())}, opts...)...)
	if err != nil {
		return true
	}
	defer with.Close()
	return with.OptValue(kgo.FetchIsolationLevel) != base.OptValue(kgo.FetchIsolationLevel)
}
