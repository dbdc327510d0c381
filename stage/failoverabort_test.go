package stage

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestOffsetCommitFailoverKeepsClient: while the group coordinator fails
// over, a step's transactional offset commit fails with connection errors
// and franz-go aborts the transaction. The abort is acknowledged, so the
// stage runs the step again on the same client: one client session for
// the whole run, every output exactly once, and the fold state a pure fold
// of the inputs.
func TestOffsetCommitFailoverKeepsClient(t *testing.T) {
	broker.KfakeOnly(t, "drops TxnOffsetCommit connections through a kfake Control hook")
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := counterStage(in, out)
	e.changelogs(2, st)

	var offsetCommits, dropped, sessions atomic.Int64
	fake := e.c.Fake()
	fake.ControlKey(int16(kmsg.TxnOffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		// Every fourth step's commit sees a coordinator that is gone:
		// each of its tries loses the connection (kfake closes it).
		if n := offsetCommits.Add(1); n%8 < 4 || n > 60 {
			return nil, nil, false
		}
		dropped.Add(1)
		return nil, errors.New("coordinator gone"), true
	})
	cfg := e.config("i1")
	cfg.MaxPollRecords = 7
	cfg.MaxStepRecords = 7 // one poll a step: the test counts steps
	// Give a failing offset commit up after its fourth try, as one does
	// when the coordinator stays unreachable past the retry timeout.
	cfg.ClientOpts = []kgo.Opt{kgo.RetryTimeoutFn(func(key int16) time.Duration {
		if key == int16(kmsg.TxnOffsetCommit) {
			return 250 * time.Millisecond
		}
		return 30 * time.Second
	})}
	a, err := New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	a.hooks.onSession = func(*kgo.GroupTransactSession) { sessions.Add(1) }
	r := e.startApp(a)
	want := e.inputs("in", 60, 6, 2, 0)
	outs := e.readExactly("out", 60, 60*time.Second)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, outs, want)
	checkStates(t, foldStates(t, cfg.StateDir), want)
	t.Logf("%d offset commit tries, %d dropped, %d client sessions", offsetCommits.Load(), dropped.Load(), sessions.Load())
	if dropped.Load() == 0 {
		t.Fatal("no offset commit was dropped; the test proved nothing")
	}
	if n := sessions.Load(); n != 1 {
		t.Errorf("%d client sessions, want 1: the stage rebuilt its client after an acknowledged abort", n)
	}
}
