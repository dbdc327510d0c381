package stage

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kgo"
)

// manualClock is an injected wall clock that moves only when told.
type manualClock struct {
	mu  sync.Mutex
	now time.Time
}

func newManualClock() *manualClock {
	return &manualClock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
}

func (c *manualClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *manualClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// logCapture is a slog handler that keeps every record at WARN or above.
type logCapture struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (l *logCapture) Enabled(_ context.Context, lv slog.Level) bool { return lv >= slog.LevelWarn }
func (l *logCapture) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.recs = append(l.recs, r.Clone())
	l.mu.Unlock()
	return nil
}
func (l *logCapture) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCapture) WithGroup(string) slog.Handler      { return l }

// holdWarnings returns, per warning about a held record, its attributes.
func (l *logCapture) holdWarnings() []map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]string
	for _, r := range l.recs {
		if !strings.Contains(r.Message, "record held past HoldWarningAfter") {
			continue
		}
		m := map[string]string{"msg": r.Message}
		r.Attrs(func(a slog.Attr) bool {
			m[a.Key] = a.Value.String()
			return true
		})
		out = append(out, m)
	}
	return out
}

// topicID returns the ID of a topic in e's cluster.
func (e *env) topicID(name string) headers.TopicID {
	e.t.Helper()
	id, err := e.c.TopicID(context.Background(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	return headers.TopicID(id)
}

// stamped returns a record carrying st in the vc dialect.
func stamped(t testing.TB, topic string, p int32, key, value string, st *headers.Stamp) *kgo.Record {
	t.Helper()
	r := rec(topic, p, key, value)
	hs, err := headers.AppendStamp(r.Headers, st, headers.DialectVC)
	if err != nil {
		t.Fatal(err)
	}
	r.Headers = hs
	return r
}

// openTxn begins a transaction that produces recs and stays open until the
// returned commit is called.
func (e *env) openTxn(id string, recs ...*kgo.Record) (commit func()) {
	e.t.Helper()
	cl, err := e.c.NewClient(kgo.TransactionalID(id), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		e.t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		e.t.Fatal(err)
	}
	done := false
	e.t.Cleanup(func() {
		if !done {
			cl.Close()
		}
	})
	return func() {
		e.t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			e.t.Fatal(err)
		}
		done = true
		cl.Close()
	}
}
