package stage

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/broker"
	"github.com/twmb/franz-go/pkg/kgo"
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

func TestAbandonedSelectsDepartedInstances(t *testing.T) {
	open := []openTxn{
		{txnID: "app-i1"},   // self
		{txnID: "app-i2"},   // a member: hands its task over itself
		{txnID: "app-i3"},   // departed
		{txnID: "app-x-i3"}, // instance "x-i3" of app, departed
		{txnID: "other-i3"}, // another application's
		{txnID: "app-"},     // no instance
		{txnID: "app"},      // not of the form
	}
	var got []string
	for _, o := range abandoned("app", "i1", []string{"i2", "i4"}, open) {
		got = append(got, o.txnID)
	}
	if want := []string{"app-i3", "app-x-i3"}; !slices.Equal(got, want) {
		t.Errorf("abandoned = %v, want %v", got, want)
	}
}

// TestTakeoverFencesAbandonedTransaction: an instance that died in the
// middle of a step left its transaction open on a task's changelog and on
// an output partition, with a timeout far longer than the test. The task's
// new owner ends it: it restores and processes, readers see every output,
// and the departed instance's producer is fenced.
func TestTakeoverFencesAbandonedTransaction(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := counterStage(in, out)
	e.changelogs(2, st)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	gone, err := e.c.NewClient(kgo.TransactionalID(e.app+"-gone"), kgo.TransactionTimeout(10*time.Minute),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer gone.Close()
	if err := gone.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := gone.ProduceSync(ctx,
		&kgo.Record{Topic: ChangelogTopic(e.app, st.Name()), Partition: 0, Key: []byte("k0"), Value: []byte("garbage")},
		&kgo.Record{Topic: "out", Partition: 0, Key: []byte("k0"), Value: []byte("garbage")},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}

	logs := &messageLog{}
	cfg := e.config("i1")
	cfg.Logger = slog.New(logs)
	r := e.start(cfg, st)
	defer r.stop()
	want := e.inputs("in", 20, 4, 2, 0)
	// Without the fence, partition 0 restores (and out[0] is readable)
	// only after the 10-minute transaction timeout.
	checkCounts(t, e.readExactly("out", 20, 30*time.Second), want)
	if n := logs.count("aborted the transaction a departed instance left open"); n != 1 {
		t.Errorf("%d fence messages, want 1", n)
	}
	txns, err := e.c.Admin().DescribeTransactions(ctx, e.app+"-gone")
	if err != nil {
		t.Fatal(err)
	}
	if d := txns[e.app+"-gone"]; d.State == "Ongoing" {
		t.Errorf("the departed instance's transaction is still %s", d.State)
	}
	if err := gone.EndTransaction(ctx, kgo.TryCommit); err == nil {
		t.Error("the departed instance committed after its task moved: it was not fenced")
	}
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
