package stage

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kadm"
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

// startLogged starts instance i1 of st with a logger that keeps every
// message.
func (e *env) startLogged(st *Stage) (*running, *messageLog) {
	logs := &messageLog{}
	cfg := e.config("i1")
	cfg.Logger = slog.New(logs)
	return e.start(cfg, st), logs
}

func TestDepartedExcludesSelfAndMembers(t *testing.T) {
	candidates := map[string]bool{"i1": true, "i2": true, "i3": true, "x-i5": true, "": true}
	got := departed(candidates, "i1", []string{"i2", "i4"})
	if want := []string{"i3", "x-i5"}; !slices.Equal(got, want) {
		t.Errorf("departed = %v, want %v", got, want)
	}
}

// TestTakeoverFencesAbandonedTransaction: an instance that died in the
// middle of a step left its transaction open, with a timeout far longer
// than the test, on an output partition and, in one case, on a task's
// changelog; in the other the task's committed offset names it. The task's
// new owner ends it: it restores and processes, readers see every output,
// the departed instance's producer is fenced, and the new owner's commits
// name it in turn.
func TestTakeoverFencesAbandonedTransaction(t *testing.T) {
	for _, tc := range []struct {
		name      string
		changelog bool // the open transaction wrote the task's changelog
		committed bool // the task's committed offset names the departed instance
	}{
		{"open on the changelog", true, false},
		{"named by the committed offset", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
			in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
			st := counterStage(in, out)
			e.changelogs(2, st)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if tc.committed {
				// As the departed instance's last committed step left it.
				if _, err := e.c.Admin().CommitOffsets(ctx, e.app, kadm.Offsets{"in": {0: {Topic: "in", Partition: 0, At: 0, LeaderEpoch: -1, Metadata: "gone"}}}); err != nil {
					t.Fatal(err)
				}
			}
			gone, err := e.c.NewClient(kgo.TransactionalID(e.app+"-gone"), kgo.TransactionTimeout(10*time.Minute),
				kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer gone.Close()
			if err := gone.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			recs := []*kgo.Record{{Topic: "out", Partition: 0, Key: []byte("k0"), Value: []byte("garbage")}}
			if tc.changelog {
				recs = append(recs, &kgo.Record{Topic: ChangelogTopic(e.app, st.Name()), Partition: 0, Key: []byte("k0"), Value: []byte("garbage")})
			}
			if err := gone.ProduceSync(ctx, recs...).FirstErr(); err != nil {
				t.Fatal(err)
			}

			r, logs := e.startLogged(st)
			defer r.stop()
			want := e.inputs("in", 20, 4, 2, 0)
			// Without the fence, out[0] is readable (and partition 0
			// restores) only after the 10-minute transaction timeout.
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
			committed, err := e.c.Admin().FetchOffsets(ctx, e.app)
			if err != nil {
				t.Fatal(err)
			}
			for p := range int32(2) {
				if o, _ := committed.Lookup("in", p); o.Metadata != "i1" {
					t.Errorf("in[%d] committed with metadata %q, want the instance ID %q", p, o.Metadata, "i1")
				}
			}
		})
	}
}

func TestHeartbeatInterval(t *testing.T) {
	for _, tc := range []struct{ session, want time.Duration }{
		{kgoSessionTimeout, maxHeartbeat}, // franz-go's default, Config's unless set
		{750 * time.Millisecond, maxHeartbeat},
		{3 * time.Second, maxHeartbeat},
		{600 * time.Millisecond, 200 * time.Millisecond}, // a third of it, as Kafka asks
	} {
		if got := heartbeatInterval(tc.session); got != tc.want {
			t.Errorf("heartbeatInterval(%v) = %v, want %v", tc.session, got, tc.want)
		}
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
	r, logs := e.startLogged(st)
	defer r.stop()
	want := e.inputs("in", 10, 2, 2, 0)
	// The tasks restored before the first step, and any rejoin was asked
	// for on the way.
	checkCounts(t, e.readExactly("out", 10, 30*time.Second), want)
	if n := logs.count("asking the group to rebalance"); n != 0 {
		t.Errorf("the instance asked for %d rebalances while its tasks restored, want 0", n)
	}
}
