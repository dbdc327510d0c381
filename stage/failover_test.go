package stage

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/broker"
)

// messageLog keeps the message of every log record.
type messageLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *messageLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *messageLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	l.msgs = append(l.msgs, r.Message)
	l.mu.Unlock()
	return nil
}
func (l *messageLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *messageLog) WithGroup(string) slog.Handler      { return l }

func (l *messageLog) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, substr) {
			n++
		}
	}
	return n
}

// TestRestoreAsksNoRebalance: a task that restores holds its partitions
// back until the restore ends, but they are assigned: only partitions the
// assignment itself holds back make the instance rejoin (a rejoin stalls
// every member's commits until the join ends).
func TestRestoreAsksNoRebalance(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := counterStage(in, out)
	e.changelogs(2, st)
	logs := &messageLog{}
	cfg := e.config("i1")
	cfg.Logger = slog.New(logs)
	r := e.start(cfg, st)
	defer r.stop()
	want := e.inputs("in", 10, 2, 2, 0)
	// The tasks restored before the first step, and any rejoin was asked
	// for on the way.
	checkCounts(t, e.readExactly("out", 10, 30*time.Second), want)
	if n := logs.count("asking the group to rebalance"); n != 0 {
		t.Errorf("the instance asked for %d rebalances while its tasks restored, want 0", n)
	}
}
