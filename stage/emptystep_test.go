package stage

import (
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
)

// clientLog keeps franz-go's log messages; count (messageLog's) finds
// them.
type clientLog struct{ messageLog }

func (l *clientLog) Level() kgo.LogLevel { return kgo.LogLevelDebug }

func (l *clientLog) Log(_ kgo.LogLevel, msg string, _ ...any) {
	l.mu.Lock()
	l.msgs = append(l.msgs, msg)
	l.mu.Unlock()
}

// TestEmptyStepCommitsNoTransaction: the step that builds restored tasks
// and delivers nothing must not commit a transaction without offsets,
// because franz-go then holds its rebalance lock for 500 ms and the next
// step's End waits it out: every start, static restart and takeover paid
// it before the first record. The steps that consume records commit
// offsets and do not pay it.
func TestEmptyStepCommitsNoTransaction(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := counterStage(in, out)
	e.changelogs(2, st)
	cl := &clientLog{}
	cfg := e.config("i1")
	cfg.ClientOpts = []kgo.Opt{kgo.WithLogger(cl)}
	r := e.start(e.config("i1"), st)
	want := e.inputs("in", 10, 2, 2, 0)
	checkCounts(t, e.readExactly("out", 10, 30*time.Second), want)
	r.stop()
	// The restart restores both tasks and builds their nodes in a step
	// that consumes nothing.
	r = e.start(cfg, st)
	defer r.stop()
	for k, vs := range e.inputs("in", 10, 2, 2, 10) {
		want[k] = append(want[k], vs...)
	}
	checkCounts(t, e.readExactly("out", 20, 30*time.Second), want)
	if cl.count("transaction session ending") == 0 {
		t.Fatal("franz-go logged no transaction end: the capture does not see the session")
	}
	const wait500 = "sleeping 500ms before allowing a rebalance"
	if n := cl.count(wait500); n != 0 {
		t.Errorf("%d transactions committed without offsets (%q), want 0", n, wait500)
	}
}
