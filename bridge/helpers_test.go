package bridge

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const testStream = "EVENTS"

// env is an embedded Kafka cluster and an embedded NATS server with
// JetStream for one test.
type env struct {
	t     testing.TB
	kafka *broker.Cluster
	dir   string

	natsDir    string
	natsPort   int
	natsLimits server.JSLimitOpts // the server's JetStream limits (max_batch_size), at its next start
	nats       *server.Server
}

var compact = map[string]*string{"cleanup.policy": ptr("compact")}

func ptr[T any](v T) *T { return &v }

// newEnv starts both brokers, creates the Kafka topics (each with
// partitions partitions) and the bridge's changelog, and the stream
// EVENTS over "kafka.>" with a two-minute duplicate window, allowing
// atomic publish.
func newEnv(t testing.TB, partitions int32, topics ...string) *env {
	t.Helper()
	var ts []broker.Topic
	for _, n := range topics {
		ts = append(ts, broker.Topic{Name: n, Partitions: partitions})
	}
	ts = append(ts, broker.Topic{Name: ChangelogTopic("grp", "bridge"), Partitions: partitions, Configs: compact})
	k := broker.New(t, broker.FakeOpts(kfake.GroupMinSessionTimeout(100*time.Millisecond)), broker.Topics(ts...))
	e := &env{t: t, kafka: k, dir: t.TempDir(), natsDir: t.TempDir(), natsPort: -1}
	e.startNATS()
	t.Cleanup(e.stopNATS)
	e.createStream(jetstream.StreamConfig{Name: testStream, Subjects: []string{"kafka.>"}, Duplicates: 2 * time.Minute, AllowAtomicPublish: true})
	return e
}

// startNATS starts the server on loopback (a random port the first time,
// the same port after a restart) over the same store.
func (e *env) startNATS() {
	e.t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: e.natsPort, JetStream: true, StoreDir: e.natsDir,
		JetStreamLimits: e.natsLimits, NoLog: true, NoSigs: true,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		e.t.Fatal("nats-server not ready within 10s")
	}
	e.nats = s
	e.natsPort = s.Addr().(*net.TCPAddr).Port
}

func (e *env) stopNATS() {
	if e.nats != nil {
		e.nats.Shutdown()
		e.nats.WaitForShutdown()
		e.nats = nil
	}
}

func (e *env) natsURL() string { return "nats://127.0.0.1:" + strconv.Itoa(e.natsPort) }

// js returns a JetStream client of the test (not the bridge's).
func (e *env) js() (jetstream.JetStream, func()) {
	e.t.Helper()
	nc, err := nats.Connect(e.natsURL())
	if err != nil {
		e.t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		e.t.Fatal(err)
	}
	return js, nc.Close
}

func (e *env) createStream(cfg jetstream.StreamConfig) {
	e.t.Helper()
	js, done := e.js()
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, cfg); err != nil {
		e.t.Fatal(err)
	}
}

// stored is one message of the stream.
type stored struct {
	seq     uint64
	subject string
	id      string // Nats-Msg-Id
	coord   string // Parsley-Coordinate
	data    string
	header  nats.Header
}

// streamMsgs returns every message of the stream in stream order.
func (e *env) streamMsgs(name string) []stored {
	e.t.Helper()
	js, done := e.js()
	defer done()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []stored
	if info.State.Msgs == 0 {
		return nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			e.t.Fatalf("get message %d: %v", seq, err)
		}
		out = append(out, stored{seq: seq, subject: m.Subject, id: m.Header.Get(HeaderMsgID),
			coord: m.Header.Get(HeaderCoordinate), data: string(m.Data), header: m.Header})
	}
	return out
}

// config is a bridge configuration over the env with test timings.
func (e *env) config(topics ...string) Config {
	subj, err := Template("kafka.{topic}.{partition}")
	if err != nil {
		e.t.Fatal(err)
	}
	return Config{
		SinkConfig: SinkConfig{
			Subject:        subj,
			NATSURL:        e.natsURL(),
			NATSOptions:    []nats.Option{nats.ReconnectWait(50 * time.Millisecond)},
			Stream:         testStream,
			AckTimeout:     2 * time.Second,
			ConnectBackoff: 50 * time.Millisecond,
			Logger:         testLogger(),
		},
		Brokers:            e.kafka.Addrs(),
		ApplicationID:      "grp",
		InstanceID:         "i1",
		StateDir:           filepath.Join(e.dir, "state"),
		Topics:             topics,
		RetryBackoff:       50 * time.Millisecond,
		PollInterval:       50 * time.Millisecond,
		SessionTimeout:     2 * time.Second,
		RebalanceTimeout:   3 * time.Second,
		TransactionTimeout: 10 * time.Second,
	}
}

func testLogger() *slog.Logger {
	if os.Getenv("BRIDGE_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// running is a bridge running in a goroutine.
type running struct {
	b      *Bridge
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

func (e *env) start(b *Bridge) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{b: b, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = b.Run(ctx)
	}()
	e.t.Cleanup(func() { r.stop() })
	return r
}

func (r *running) stop() error {
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		return errFmt("Run did not return within 30s of cancel")
	}
	return r.err
}

type errFmt string

func (e errFmt) Error() string { return string(e) }

// produce sends records with a plain idempotent producer to the
// partitions set on them.
func (e *env) produce(recs ...*kgo.Record) {
	e.t.Helper()
	cl, err := e.kafka.NewClient(kgo.RecordPartitioner(kgo.ManualPartitioner()))
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

func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// checkExactlyOnceInOrder checks the stream holds exactly the records
// want (Parsley-Coordinate values), each once, and that within each
// partition the stream order is offset order.
func checkExactlyOnceInOrder(t testing.TB, got []stored, want []string) {
	t.Helper()
	seen := make(map[string]int)
	last := make(map[string]int64) // "topic/partition" -> last offset
	for _, m := range got {
		seen[m.coord]++
		if m.id == "" {
			t.Fatalf("message %d (%s) has no %s", m.seq, m.coord, HeaderMsgID)
		}
		ch, off, ok := strings.Cut(m.coord, "@")
		if !ok {
			t.Fatalf("message %d: bad coordinate %q", m.seq, m.coord)
		}
		o, err := strconv.ParseInt(off, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if l, ok := last[ch]; ok && o <= l {
			t.Fatalf("stream order on %s: offset %d after %d (message %d)", ch, o, l, m.seq)
		}
		last[ch] = o
	}
	var dups, missing []string
	for c, n := range seen {
		if n > 1 {
			dups = append(dups, c)
		}
	}
	for _, c := range want {
		if seen[c] == 0 {
			missing = append(missing, c)
		}
	}
	sort.Strings(dups)
	if len(dups) > 0 || len(missing) > 0 || len(got) != len(want) {
		t.Fatalf("stream has %d messages, want %d; duplicated %q; missing %q", len(got), len(want), dups, missing)
	}
}

// logBuffer collects a logger's output across goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// logger returns a logger writing into l (and to stderr as testLogger does).
func (l *logBuffer) logger() *slog.Logger {
	var w io.Writer = l
	if os.Getenv("BRIDGE_TEST_LOG") != "" {
		w = io.MultiWriter(l, os.Stderr)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// The publisher's mode, or nil when it is in another.
func (p *publisher) atomicMode() *atomicBatches { x, _ := p.mode.(*atomicBatches); return x }
func (p *publisher) fastMode() *fastBatches     { x, _ := p.mode.(*fastBatches); return x }
func (p *publisher) perMsg() *perMessage        { x, _ := p.mode.(*perMessage); return x }
