package stage

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// env is an embedded cluster and an application ID for one test.
type env struct {
	t   testing.TB
	c   *broker.Cluster
	app string
	dir string
}

var compact = map[string]*string{"cleanup.policy": ptr("compact")}

func ptr[T any](v T) *T { return &v }

func newEnv(t testing.TB, topics ...broker.Topic) *env {
	t.Helper()
	return newEnvWith(t, nil, topics...)
}

func newEnvWith(t testing.TB, opts []broker.Option, topics ...broker.Topic) *env {
	t.Helper()
	c := broker.New(t, append([]broker.Option{broker.FakeOpts(kfake.GroupMinSessionTimeout(100 * time.Millisecond)), broker.Topics(topics...)}, opts...)...)
	return &env{t: t, c: c, app: "app", dir: t.TempDir()}
}

// changelogs creates the changelog topics of stages.
func (e *env) changelogs(partitions int32, stages ...*Stage) {
	e.t.Helper()
	for _, s := range stages {
		if err := e.c.CreateTopics(context.Background(), broker.Topic{Name: ChangelogTopic(e.app, s.Name()), Partitions: partitions, Configs: compact}); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *env) config(instance string) Config {
	return Config{
		ApplicationID:      e.app,
		InstanceID:         instance,
		Brokers:            e.c.Addrs(),
		StateDir:           filepath.Join(e.dir, instance),
		PollInterval:       50 * time.Millisecond,
		SessionTimeout:     2 * time.Second,
		RebalanceTimeout:   3 * time.Second,
		TransactionTimeout: 5 * time.Second,
		RetryBackoff:       50 * time.Millisecond,
		Logger:             testLogger(),
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("STAGE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// running is an App running in a goroutine.
type running struct {
	app    *App
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func (e *env) start(cfg Config, stages ...*Stage) *running {
	e.t.Helper()
	a, err := New(cfg, stages...)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.startApp(a)
}

func (e *env) startApp(a *App) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{app: a, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = a.Run(ctx)
	}()
	e.t.Cleanup(func() { r.stop() })
	return r
}

// stop cancels the app and waits for Run to return.
func (r *running) stop() error {
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		return errors.New("Run did not return within 30s of cancel")
	}
	return r.err
}

// exited returns Run's error if it returned, waiting up to d.
func (r *running) exited(d time.Duration) (error, bool) {
	select {
	case <-r.done:
		return r.err, true
	case <-time.After(d):
		return nil, false
	}
}

// produce sends records with a plain idempotent producer, to the partition
// set on each record, and waits for the acknowledgements.
func (e *env) produce(recs ...*kgo.Record) {
	e.t.Helper()
	cl, err := e.c.NewClient(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
}

func rec(topic string, p int32, key, value string) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: p, Key: []byte(key), Value: []byte(value)}
}

// readCommitted reads topic from the beginning, read_committed, until it has
// want data records or timeout passes, and returns them sorted by partition
// and offset. With want < 0 it reads up to the end offsets now.
func (e *env) readCommitted(topic string, want int, timeout time.Duration) []*kgo.Record {
	e.t.Helper()
	cl, err := e.c.NewClient(
		kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
	)
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	deadline := time.Now().Add(timeout)
	for len(out) < want && time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Partition != out[j].Partition {
			return out[i].Partition < out[j].Partition
		}
		return out[i].Offset < out[j].Offset
	})
	return out
}

// settle reads topic for d more after it has want records, to catch
// duplicates that arrive late.
func (e *env) readExactly(topic string, want int, timeout time.Duration) []*kgo.Record {
	e.t.Helper()
	got := e.readCommitted(topic, want, timeout)
	if len(got) < want {
		e.t.Fatalf("%s: read %d records within %v, want %d", topic, len(got), timeout, want)
	}
	more := e.readCommitted(topic, want+1, 300*time.Millisecond)
	if len(more) > want {
		e.t.Fatalf("%s: read %d records, want exactly %d", topic, len(more), want)
	}
	return got
}

func values(rs []*kgo.Record) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r.Value)
	}
	return out
}

// waitFor polls cond until it holds or timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// collector records what a handler saw, safe for concurrent use.
type collector struct {
	mu  sync.Mutex
	got []string
}

func (c *collector) add(s string) {
	c.mu.Lock()
	c.got = append(c.got, s)
	c.mu.Unlock()
}

func (c *collector) snapshot() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.got...)
}

func (c *collector) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.got)
}

func coordString(topic string, p int32, off int64) string {
	return fmt.Sprintf("%s[%d]@%d", topic, p, off)
}

func setUserVersion(t *testing.T, path string, v int) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(fmt.Sprintf("PRAGMA user_version = %d", v)); err != nil {
		t.Fatal(err)
	}
}

// loopRunner runs functions on an App's session loop, which owns the tasks,
// at its next idle poll.
type loopRunner chan func()

// onLoop installs a loopRunner on a; call it before Run.
func onLoop(a *App) loopRunner {
	l := make(loopRunner)
	a.hooks.idle = func() {
		select {
		case f := <-l:
			f()
		default:
		}
	}
	return l
}

// do runs f on the loop and waits for it.
func (l loopRunner) do(t testing.TB, f func()) {
	t.Helper()
	done := make(chan struct{})
	select {
	case l <- func() { defer close(done); f() }:
	case <-time.After(20 * time.Second):
		t.Fatal("the session loop did not idle within 20s")
	}
	<-done
}
