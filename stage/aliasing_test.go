package stage

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/aliascodec"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Tests that the runtime keeps nothing it hands to user code (#29): a
// fold whose state codec aliases the stored bytes and updates them in
// place (aliascodec) gives exactly the outputs and the changelog of a fold
// over a copying codec, across aborted steps.

// countingStage is counter over either state codec: copying (Int64) or
// aliasing (aliascodec, updated in place). It also sends each count to
// topic "counts", encoded by the same codec as the state: the aliasing
// fold sends its state view itself, whose bytes are the state it stores.
// Both codecs write the same bytes. seen, when not nil, counts the fold's
// calls.
func countingStage(name string, aliasing bool, in, out *Topic[string, string], seen *atomic.Int64) *Stage {
	emit := func(k, v string, n int64) Emission { return out.Send(k, fmt.Sprintf("%s#%d:%s", k, n, v)) }
	if !aliasing {
		counts := NewTopic("counts", String(), Int64())
		b := WithState(Named(name), Int64(), 0)
		OnFold(b, in, func(n int64, m Message[string, string]) (Step[int64], error) {
			if seen != nil {
				seen.Add(1)
			}
			n++
			return Next(n, emit(m.Key, m.Value, n), counts.Send(m.Key, n)), nil
		})
		return b.Into(out, counts).MustBuild()
	}
	counts := NewTopic("counts", String(), Codec[aliascodec.Int64](aliascodec.Codec{}))
	b := WithState(Named(name), Codec[aliascodec.Int64](aliascodec.Codec{}), aliascodec.NewInt64(0))
	OnFold(b, in, func(s aliascodec.Int64, m Message[string, string]) (Step[aliascodec.Int64], error) {
		if seen != nil {
			seen.Add(1)
		}
		n := s.Add(1) // writes the bytes the state was decoded from
		return Next(s, emit(m.Key, m.Value, n), counts.Send(m.Key, s)), nil
	})
	return b.Into(out, counts).MustBuild()
}

// checkCountTopic checks that topic "counts" holds, per key, 1..n in
// order, n the key's inputs.
func checkCountTopic(t *testing.T, rs []*kgo.Record, want map[string][]string) {
	t.Helper()
	got := make(map[string][]int64)
	for _, r := range rs {
		if len(r.Value) != 8 {
			t.Fatalf("counts: value of %d bytes", len(r.Value))
		}
		got[string(r.Key)] = append(got[string(r.Key)], int64(binary.BigEndian.Uint64(r.Value)))
	}
	for k, vs := range want {
		for i := range vs {
			if i >= len(got[k]) || got[k][i] != int64(i+1) {
				t.Errorf("counts of %s = %v, want 1..%d", k, got[k], len(vs))
				break
			}
		}
		if len(got[k]) != len(vs) {
			t.Errorf("counts of %s: %d, want %d", k, len(got[k]), len(vs))
		}
	}
}

// changelogCounts returns, per fold key, the committed int64 values of its
// state in changelog order, read to the changelog's end.
func (e *env) changelogCounts(stage string) map[string][]int64 {
	e.t.Helper()
	topic := ChangelogTopic(e.app, stage)
	ends, err := e.c.Admin().ListEndOffsets(context.Background(), topic)
	if err != nil {
		e.t.Fatal(err)
	}
	out := make(map[string][]int64)
	ends.Each(func(end kadm.ListedOffset) {
		if end.Offset == 0 {
			return
		}
		cl, err := e.c.NewClient(
			kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {end.Partition: kgo.NewOffset().AtStart()}}),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.KeepControlRecords())
		if err != nil {
			e.t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for next := int64(0); next < end.Offset; {
			fs := cl.PollFetches(ctx)
			if err := fs.Err0(); err != nil {
				e.t.Fatalf("read %s[%d]: %v", topic, end.Partition, err)
			}
			fs.EachRecord(func(r *kgo.Record) {
				next = r.Offset + 1
				if r.Attrs.IsControl() || r.Offset >= end.Offset || !strings.HasPrefix(string(r.Key), "\x02") {
					return
				}
				if len(r.Value) != 8 {
					e.t.Fatalf("changelog value of %q: %d bytes", r.Key, len(r.Value))
				}
				k := string(r.Key[1:])
				out[k] = append(out[k], int64(binary.BigEndian.Uint64(r.Value)))
			})
		}
	})
	return out
}

// TestAbortedStepLeavesNoStateBehind is #29's confirmed defect: one record
// per step, the step that processed the fourth record aborted before End.
// The retry must count from the committed 3, not from the aborted step's
// 4: outputs #1..#6 and changelog 1..6, with either codec. Before the fix
// the aliasing fold wrote 4 into the unwritten committed layer, and the
// outputs went 1,2,3,5,6,7.
func TestAbortedStepLeavesNoStateBehind(t *testing.T) {
	for _, aliasing := range []bool{false, true} {
		t.Run(fmt.Sprintf("aliasing=%v", aliasing), func(t *testing.T) {
			e := newEnv(t, broker.Topic{Name: "in", Partitions: 1}, broker.Topic{Name: "out", Partitions: 1}, broker.Topic{Name: "counts", Partitions: 1})
			in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
			var seen atomic.Int64
			st := countingStage("count", aliasing, in, out, &seen)
			e.changelogs(1, st)
			cfg := e.config("a")
			cfg.MaxPollRecords = 1
			cfg.MaxStepRecords = 1 // one poll a step: the test counts steps
			a, err := New(cfg, st)
			if err != nil {
				t.Fatal(err)
			}
			var aborted atomic.Bool
			a.hooks.beforeEnd = func(int64) bool {
				// The fourth fold call is the fourth record's first try.
				return seen.Load() == 4 && aborted.CompareAndSwap(false, true)
			}
			e.startApp(a)
			want := e.inputs("in", 6, 1, 1, 0)
			checkCounts(t, e.readExactly("out", 6, 20*time.Second), want)
			if !aborted.Load() {
				t.Fatal("no step was aborted")
			}
			if seen.Load() != 7 {
				t.Errorf("the fold ran %d times, want 7 (six records, one retried)", seen.Load())
			}
			if got := e.changelogCounts("count")["k0"]; fmt.Sprint(got) != "[1 2 3 4 5 6]" {
				t.Errorf("changelog of k0 = %v, want [1 2 3 4 5 6]", got)
			}
		})
	}
}

// TestAliasingStateUnderAborts: many keys, many records per step, one step
// in three aborted before End. The aliasing fold updates in place the
// state it loads, sends the state's own bytes, and starts every key from
// the one initial value; the outputs, the counts and the changelog must be
// the copying fold's, whichever layer the state is read from (the step's
// writes, the unwritten committed ones, the file). Each
// would fail without a copy: the initial value
// mutated (new keys count on from the last new key's count), a step's
// own write reloaded in place (an earlier send of the step changes before
// the producer encodes it), committed state reloaded in place (the
// aborted step's counts survive).
func TestAliasingStateUnderAborts(t *testing.T) {
	for _, aliasing := range []bool{false, true} {
		t.Run(fmt.Sprintf("aliasing=%v", aliasing), func(t *testing.T) {
			const parts, keys, n = 2, 5, 280 // past storeEvery steps: state is read back from the file too
			e := newEnv(t, broker.Topic{Name: "in", Partitions: parts}, broker.Topic{Name: "out", Partitions: parts}, broker.Topic{Name: "counts", Partitions: parts})
			in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
			st := countingStage("count", aliasing, in, out, nil)
			e.changelogs(parts, st)
			cfg := e.config("a")
			cfg.MaxPollRecords = 7
			cfg.MaxStepRecords = 7 // one poll a step: the test counts steps
			a, err := New(cfg, st)
			if err != nil {
				t.Fatal(err)
			}
			var ends, aborted atomic.Int64
			a.hooks.beforeEnd = func(int64) bool {
				if ends.Add(1)%3 == 0 {
					aborted.Add(1)
					return true
				}
				return false
			}
			e.startApp(a)
			want := e.inputs("in", n, keys, parts, 0)
			checkCounts(t, e.readExactly("out", n, 30*time.Second), want)
			checkCountTopic(t, e.readExactly("counts", n, 10*time.Second), want)
			if aborted.Load() == 0 {
				t.Fatal("no step was aborted")
			}
			cl := e.changelogCounts("count")
			for k, vs := range want {
				got := cl[k]
				if len(got) == 0 || got[len(got)-1] != int64(len(vs)) {
					t.Errorf("changelog of %s = %v, want it to end at %d", k, got, len(vs))
				}
				for i := 1; i < len(got); i++ {
					if got[i] <= got[i-1] {
						t.Errorf("changelog of %s = %v: not increasing", k, got)
						break
					}
				}
			}
		})
	}
}

// TestMutatedDeliveriesDoNotLeak: handlers that overwrite the key and value
// bytes they are handed (identity codecs alias the record) in a step that
// aborts. The retry sees the records as fetched: the held one from the
// committed state, which must have handed out a copy, the live one from a
// new fetch.
func TestMutatedDeliveriesDoNotLeak(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "a"}, broker.Topic{Name: "b"}, broker.Topic{Name: "out"})
	out := NewTopic("out", String(), String())
	bld := Named("s")
	for _, n := range []string{"a", "b"} {
		On(bld, NewTopic(n, Bytes(), Bytes()), func(m Message[[]byte, []byte]) ([]Emission, error) {
			em := out.Send(string(m.Key), string(m.Value)) // String encodes a copy
			for i := range m.Key {
				m.Key[i] = 'X'
			}
			for i := range m.Value {
				m.Value[i] = 'X'
			}
			return []Emission{em}, nil
		})
	}
	st := bld.Into(out).MustBuild()
	e.changelogs(1, st)
	a, err := New(e.config("i1"), st)
	if err != nil {
		t.Fatal(err)
	}
	var abortNext, aborts atomic.Int64
	a.hooks.beforeEnd = func(int64) bool {
		if abortNext.Load() > 0 {
			abortNext.Add(-1)
			aborts.Add(1)
			return true
		}
		return false
	}
	r := e.startApp(a)
	// A first commit writes the new store's file at once (its checkpoint
	// time is unset); the hold after it stays in the unwritten writes.
	e.produce(rec("a", 0, "ka", "a0"))
	e.readExactly("out", 1, 20*time.Second)
	var s headers.Stamp
	s.Clock.SetOffset(headers.Channel{Topic: e.topicID("a"), Partition: 0}, 1)
	e.produce(stamped(t, "b", 0, "kb", "b0", &s)) // held until a@1
	waitFor(t, 20*time.Second, "the hold", func() bool { return len(r.app.ExplainHolds()) == 1 })
	abortNext.Store(2)
	e.produce(rec("a", 0, "ka", "a1"))
	got := e.readExactly("out", 3, 20*time.Second)
	if aborts.Load() != 2 {
		t.Fatalf("%d steps aborted, want 2", aborts.Load())
	}
	want := []string{"ka=a0", "ka=a1", "kb=b0"}
	for i, r := range got {
		if s := string(r.Key) + "=" + string(r.Value); s != want[i] {
			t.Errorf("output %d = %s, want %s", i, s, want[i])
		}
	}
}

// TestKeepAfterInPlaceUpdate: a fold that updates its state in place and
// then returns Keep changes nothing: the next record sees the count as it
// was. Without the unwritten layer's copy the kept update survived (1 3 4
// 6 ...). One record per step, past
// storeEvery steps, one End in three aborted.
func TestKeepAfterInPlaceUpdate(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in"}, broker.Topic{Name: "out"})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	b := WithState(Named("count"), Codec[aliascodec.Int64](aliascodec.Codec{}), aliascodec.NewInt64(0))
	OnFold(b, in, func(s aliascodec.Int64, m Message[string, string]) (Step[aliascodec.Int64], error) {
		em := out.Send(m.Key, fmt.Sprint(s.Add(1)))
		if strings.HasPrefix(m.Value, "keep") {
			return Keep[aliascodec.Int64](em), nil
		}
		return Next(s, em), nil
	})
	st := b.Into(out).MustBuild()
	e.changelogs(1, st)
	cfg := e.config("a")
	cfg.MaxPollRecords = 1
	cfg.MaxStepRecords = 1 // one poll a step: the test counts steps
	a, err := New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	var ends atomic.Int64
	a.hooks.beforeEnd = func(int64) bool { return ends.Add(1)%3 == 0 }
	e.startApp(a)
	const n = 3 * storeEvery
	var want []string
	count := int64(0)
	for i := range n {
		v := fmt.Sprintf("v%d", i)
		if i%3 == 1 {
			v = fmt.Sprintf("keep%d", i)
			want = append(want, fmt.Sprint(count+1))
		} else {
			count++
			want = append(want, fmt.Sprint(count))
		}
		e.produce(rec("in", 0, "k", v))
	}
	got := values(e.readExactly("out", n, 60*time.Second))
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("outputs %v, want %v", got, want)
	}
}
