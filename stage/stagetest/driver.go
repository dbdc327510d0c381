// Package stagetest runs stage applications in tests, with nothing but
// `go test`: Driver starts an application on an in-process Kafka cluster
// (franz-go's kfake, speaking the real protocol, with transactions and
// read_committed), pipes typed records in, reads decoded outputs back and
// moves an injected wall clock so ticks fire deterministically. Probe and
// ProbeCluster check the mechanically checkable clauses of the contract
// between an application and the runtime (docs/testing.md).
//
// The driver runs the real runtime — the causal gate, stamps, the SQLite
// store and its changelog, exactly-once steps — so what passes here is
// wiring that runs in production unchanged; only the brokers differ.
package stagetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/stage"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TB is the part of testing.TB the driver uses.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
	TempDir() string
}

// Option configures a Driver.
type Option func(*options)

type options struct {
	appID      string
	partitions int32
	start      time.Time
	timeout    time.Duration
	logger     *slog.Logger
	cfg        func(*stage.Config)
}

// ApplicationID sets the application ID (default "app").
func ApplicationID(id string) Option { return func(o *options) { o.appID = id } }

// Partitions sets the partition count of every topic the driver creates
// (default 1).
func Partitions(n int32) Option { return func(o *options) { o.partitions = n } }

// StartTime sets the wall clock's initial time (default 2026-01-01 UTC), so
// tick timestamps are deterministic.
func StartTime(t time.Time) Option { return func(o *options) { o.start = t } }

// Timeout bounds every wait of the driver (default 30s).
func Timeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// Logger sets the application's logger (default: discard).
func Logger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// Configure edits the application's Config before it starts (error policy,
// hold warning threshold, ...). Brokers, StateDir and WallClock are the
// driver's.
func Configure(f func(*stage.Config)) Option { return func(o *options) { o.cfg = f } }

// Clock is the driver's wall clock: it moves only when told.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *Clock) advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

// Driver runs one application instance on an in-process cluster.
type Driver struct {
	t       TB
	opts    options
	stages  []*stage.Stage
	cluster *broker.Cluster
	clock   *Clock
	dir     string

	app     *stage.App
	reg     *prometheus.Registry
	cancel  context.CancelFunc
	done    chan struct{}
	runErr  error
	nextTk  map[string]time.Time // per ticking stage, the next tick's time
	wantTks float64              // ticks the current instance must have emitted

	rmu     sync.Mutex
	readers map[string]*kgo.Client
	buffer  map[string][]*kgo.Record
	prod    *kgo.Client // partitions by key, as Kafka's default partitioner
	manual  *kgo.Client // sends to the partition a record names
}

// New starts a cluster, creates every topic the stages declare (sources,
// sinks, changelogs, tick topics), starts the application and waits until
// it is ready. Everything stops when the test ends.
func New(t TB, stages []*stage.Stage, opts ...Option) *Driver {
	t.Helper()
	d, err := start(t, stages, opts...)
	if err != nil {
		t.Fatalf("stagetest: %v", err)
	}
	return d
}

func start(t TB, stages []*stage.Stage, opts ...Option) (*Driver, error) {
	o := options{appID: "app", partitions: 1, start: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), timeout: 30 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	if o.logger == nil {
		o.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	d := &Driver{
		t: t, opts: o, stages: stages, clock: &Clock{now: o.start}, dir: t.TempDir(),
		readers: map[string]*kgo.Client{}, buffer: map[string][]*kgo.Record{},
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	c, err := broker.Start(ctx, broker.FakeOpts(kfake.GroupMinSessionTimeout(100*time.Millisecond)))
	if err != nil {
		return nil, err
	}
	d.cluster = c
	t.Cleanup(d.close)
	if err := c.CreateTopics(ctx, d.topics()...); err != nil {
		return nil, err
	}
	if d.prod, err = c.NewClient(); err != nil {
		return nil, err
	}
	if d.manual, err = c.NewClient(kgo.RecordPartitioner(kgo.ManualPartitioner())); err != nil {
		return nil, err
	}
	if err := d.run(); err != nil {
		return nil, err
	}
	return d, nil
}

// topics returns every topic the application needs, once each.
func (d *Driver) topics() []broker.Topic {
	var out []broker.Topic
	seen := map[string]bool{}
	add := func(name string, cfg map[string]*string) {
		if !seen[name] {
			seen[name] = true
			out = append(out, broker.Topic{Name: name, Partitions: d.opts.partitions, Configs: cfg})
		}
	}
	compact := "compact"
	for _, s := range d.stages {
		if s == nil {
			continue
		}
		for _, n := range s.Sources() {
			add(n, nil)
		}
		for _, n := range s.Sinks() {
			add(n, nil)
		}
		add(stage.ChangelogTopic(d.opts.appID, s.Name()), map[string]*string{"cleanup.policy": &compact})
		if s.TickInterval() > 0 {
			add(stage.TickTopic(d.opts.appID, s.Name()), nil)
		}
	}
	return out
}

// run starts an application instance and waits until it is ready.
func (d *Driver) run() error {
	cfg := stage.Config{
		ApplicationID:      d.opts.appID,
		InstanceID:         "driver",
		Brokers:            d.cluster.Addrs(),
		StateDir:           filepath.Join(d.dir, "state"),
		PollInterval:       20 * time.Millisecond,
		SessionTimeout:     2 * time.Second,
		RebalanceTimeout:   3 * time.Second,
		TransactionTimeout: 5 * time.Second,
		RetryBackoff:       50 * time.Millisecond,
		Logger:             d.opts.logger,
	}
	if d.opts.cfg != nil {
		d.opts.cfg(&cfg)
	}
	cfg.Brokers, cfg.StateDir, cfg.WallClock = d.cluster.Addrs(), filepath.Join(d.dir, "state"), d.clock.Now
	app, err := stage.New(cfg, d.stages...)
	if err != nil {
		return err
	}
	d.app = app
	d.reg = prometheus.NewRegistry()
	if err := d.reg.Register(app.Collector()); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel, d.done, d.runErr = cancel, make(chan struct{}), nil
	go func() {
		defer close(d.done)
		d.runErr = app.Run(ctx)
	}()
	now := d.clock.Now()
	d.nextTk, d.wantTks = map[string]time.Time{}, 0
	for _, s := range d.stages {
		if e := s.TickInterval(); e > 0 {
			d.nextTk[s.Name()] = now.Add(e)
		}
	}
	return d.await("the application to become ready", func() bool {
		ok, _ := app.Readiness()
		return ok
	})
}

// await polls cond until it holds, the application stops, or the timeout.
func (d *Driver) await(what string, cond func() bool) error {
	deadline := time.Now().Add(d.opts.timeout)
	for !cond() {
		select {
		case <-d.done:
			if cond() {
				return nil
			}
			return fmt.Errorf("waiting for %s: the application stopped: %w", what, d.runErr)
		default:
		}
		if time.Now().After(deadline) {
			why := ""
			if ok, w := d.app.Readiness(); !ok {
				why = " (not ready: " + w + ")"
			}
			return fmt.Errorf("timed out after %v waiting for %s%s", d.opts.timeout, what, why)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// App returns the running application, for ExplainHolds, the collector or
// the health handler.
func (d *Driver) App() *stage.App { return d.app }

// Brokers returns the in-process cluster's addresses, for clients of your
// own.
func (d *Driver) Brokers() []string { return d.cluster.Addrs() }

// Now returns the driver's wall-clock time.
func (d *Driver) Now() time.Time { return d.clock.Now() }

// Err returns the error the application stopped with, or nil while it
// runs.
func (d *Driver) Err() error {
	select {
	case <-d.done:
		return d.runErr
	default:
		return nil
	}
}

// AdvanceWallClock moves the wall clock forward by dt. Every ticking task
// whose interval elapsed emits one tick, stamped with the new time, and
// AdvanceWallClock returns once those ticks are committed (their handlers
// run when the ticks come back through the gate; read their outputs with
// Read). A tick interval is a cadence floor: one advance across several
// intervals emits one tick per task.
func (d *Driver) AdvanceWallClock(dt time.Duration) {
	d.t.Helper()
	if err := d.advance(dt); err != nil {
		d.t.Fatalf("stagetest: %v", err)
	}
}

func (d *Driver) advance(dt time.Duration) error {
	now := d.clock.advance(dt)
	for _, s := range d.stages {
		next, ok := d.nextTk[s.Name()]
		if !ok || now.Before(next) {
			continue
		}
		d.nextTk[s.Name()] = now.Add(s.TickInterval())
		d.wantTks += float64(d.opts.partitions)
	}
	return d.await(fmt.Sprintf("%v ticks", d.wantTks), func() bool { return d.ticksEmitted() >= d.wantTks })
}

func (d *Driver) ticksEmitted() float64 {
	fams, err := d.reg.Gather()
	if err != nil {
		return -1
	}
	var n float64
	for _, f := range fams {
		if f.GetName() == "parsley_ticks_emitted_total" {
			for _, m := range f.GetMetric() {
				n += m.GetCounter().GetValue()
			}
		}
	}
	return n
}

// Restart stops the application and starts a new instance over the same
// state directory and cluster, as a redeploy would.
func (d *Driver) Restart() {
	d.t.Helper()
	if err := d.stop(); err != nil {
		d.t.Fatalf("stagetest: stop: %v", err)
	}
	if err := d.run(); err != nil {
		d.t.Fatalf("stagetest: restart: %v", err)
	}
}

func (d *Driver) stop() error {
	if d.cancel == nil {
		return nil
	}
	d.cancel()
	select {
	case <-d.done:
	case <-time.After(d.opts.timeout):
		return errors.New("the application did not stop")
	}
	return d.runErr
}

func (d *Driver) close() {
	_ = d.stop()
	d.rmu.Lock()
	for _, c := range d.readers {
		c.Close()
	}
	d.rmu.Unlock()
	for _, c := range []*kgo.Client{d.prod, d.manual} {
		if c != nil {
			c.Close()
		}
	}
	if d.cluster != nil {
		d.cluster.Close()
	}
}
