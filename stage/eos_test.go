package stage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/state"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// counterStage folds a per-key count and emits "key#n:value" for the n-th
// record of each key: any duplicate or lost delivery shows in the outputs
// and in the state.
func counterStage(in, out *Topic[string, string]) *Stage { return counter("count", in, out) }

// inputs produces n records over keys k0..k(keys-1); key i goes to
// partition i%partitions. It returns the values per key in order.
func (e *env) inputs(topic string, n, keys int, partitions int32, from int) map[string][]string {
	want := make(map[string][]string)
	var recs []*kgo.Record
	for i := from; i < from+n; i++ {
		k := i % keys
		key, val := fmt.Sprintf("k%d", k), fmt.Sprintf("v%d", i)
		recs = append(recs, rec(topic, int32(k)%partitions, key, val))
		want[key] = append(want[key], val)
	}
	e.produce(recs...)
	return want
}

// checkCounts checks the outputs are exactly, per key, "key#1:v..",
// "key#2:v..", ... in input order: no duplicate, no gap.
func checkCounts(t *testing.T, out []*kgo.Record, want map[string][]string) {
	t.Helper()
	got := make(map[string][]string)
	for _, r := range out {
		got[string(r.Key)] = append(got[string(r.Key)], string(r.Value))
	}
	for k, vs := range want {
		if len(got[k]) != len(vs) {
			t.Errorf("key %s: %d outputs, want %d: %q", k, len(got[k]), len(vs), got[k])
			continue
		}
		for i, v := range vs {
			if w := fmt.Sprintf("%s#%d:%s", k, i+1, v); got[k][i] != w {
				t.Errorf("key %s output %d = %q, want %q", k, i, got[k][i], w)
				break
			}
		}
	}
	if len(got) != len(want) {
		t.Errorf("outputs for %d keys, want %d", len(got), len(want))
	}
}

// foldStates reads the committed int64 fold state of every key from the
// task stores in dir, or else in the application directories under dir.
func foldStates(t *testing.T, dir string) map[string]int64 {
	t.Helper()
	out := make(map[string]int64)
	files, _ := filepath.Glob(filepath.Join(dir, "*.db"))
	if len(files) == 0 {
		files, _ = filepath.Glob(filepath.Join(dir, "*", "*.db"))
	}
	if len(files) == 0 {
		t.Fatalf("no task stores in %s", dir)
	}
	for _, f := range files {
		st, err := state.Open(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		err = st.Scan("\x02", func(k string, v []byte) error {
			n, err := Int64().Decode(v)
			if err != nil {
				return err
			}
			out[k[1:]] += n
			return nil
		})
		st.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func checkStates(t *testing.T, got map[string]int64, want map[string][]string) {
	t.Helper()
	for k, vs := range want {
		if got[k] != int64(len(vs)) {
			t.Errorf("state of %s = %d, want %d (a pure fold over its %d records)", k, got[k], len(vs), len(vs))
		}
	}
}

// TestExactlyOnceUnderForcedAborts aborts steps three ways — the runtime's
// own abort before End, transaction offset commits the broker refuses, and
// an EndTxn failure that makes the client unusable — and checks the
// read_committed outputs have no duplicate and no gap, and the fold state
// equals a pure fold over the inputs.
func TestExactlyOnceUnderForcedAborts(t *testing.T) {
	broker.KfakeOnly(t, "forces TxnOffsetCommit and EndTxn failures through kfake Control hooks")
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := counterStage(in, out)
	e.changelogs(2, st)

	var offsetCommits, endTxns, refused, failedEnds atomic.Int64
	fake := e.c.Fake()
	fake.ControlKey(int16(kmsg.TxnOffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		if offsetCommits.Add(1)%4 != 0 {
			return nil, nil, false
		}
		refused.Add(1)
		r := req.(*kmsg.TxnOffsetCommitRequest)
		resp := r.ResponseKind().(*kmsg.TxnOffsetCommitResponse)
		for _, rt := range r.Topics {
			t := kmsg.NewTxnOffsetCommitResponseTopic()
			t.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				p := kmsg.NewTxnOffsetCommitResponseTopicPartition()
				p.Partition = rp.Partition
				p.ErrorCode = kerr.IllegalGeneration.Code
				t.Partitions = append(t.Partitions, p)
			}
			resp.Topics = append(resp.Topics, t)
		}
		return resp, nil, true
	})
	fake.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		if r := req.(*kmsg.EndTxnRequest); !r.Commit || endTxns.Add(1)%9 != 0 {
			return nil, nil, false
		}
		failedEnds.Add(1)
		resp := req.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.InvalidProducerEpoch.Code
		return resp, nil, true
	})

	cfg := e.config("i1")
	cfg.MaxPollRecords = 7
	cfg.MaxStepRecords = 7 // one poll a step: the test counts steps
	a, err := New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	var ends, hookAborts atomic.Int64
	a.hooks.beforeEnd = func(int64) bool {
		if ends.Add(1)%3 == 0 {
			hookAborts.Add(1)
			return true
		}
		return false
	}
	r := e.startApp(a)
	want := e.inputs("in", 60, 6, 2, 0)
	more := e.inputs("in", 60, 6, 2, 60)
	for k, vs := range more {
		want[k] = append(want[k], vs...)
	}
	outs := e.readExactly("out", 120, 60*time.Second)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, outs, want)
	checkStates(t, foldStates(t, cfg.StateDir), want)
	t.Logf("committed steps %d; aborted: %d by the runtime, %d offset commits refused, %d EndTxn failures",
		a.CommittedSteps(), hookAborts.Load(), refused.Load(), failedEnds.Load())
	if hookAborts.Load() == 0 || refused.Load() == 0 || failedEnds.Load() == 0 {
		t.Fatal("a fault kind was never injected; the test proved nothing about it")
	}
}

// TestStateRestoresFromChangelog: after a clean run, deleting the task
// stores and rerunning restores the fold state from the changelog, so the
// counts continue where they left off.
func TestStateRestoresFromChangelog(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := counterStage(in, out)
	e.changelogs(2, st)
	cfg := e.config("i1")
	want := e.inputs("in", 40, 4, 2, 0)
	r := e.start(cfg, st)
	e.readExactly("out", 40, 30*time.Second)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(cfg.StateDir); err != nil {
		t.Fatal(err)
	}
	more := e.inputs("in", 40, 4, 2, 40)
	for k, vs := range more {
		want[k] = append(want[k], vs...)
	}
	r = e.start(cfg, st)
	outs := e.readExactly("out", 80, 30*time.Second)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, outs, want)
	checkStates(t, foldStates(t, cfg.StateDir), want)
}
