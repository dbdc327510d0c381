package stage

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// stampWidth returns the published stamp-side offset entries and skipped
// sweeps of the app's only task.
func stampWidth(a *App) (entries int, skipped uint64) {
	if s := a.status.snap.Load(); s != nil && len(s.tasks) == 1 {
		return s.tasks[0].stampOffsets, s.tasks[0].sweepsSkipped
	}
	return -1, 0
}

// TestTruncationSweep: a record's clock names a channel the stage does not
// consume, so its stamps carry that entry. A sweep whose log-start query
// fails skips its cycle and is counted; after DeleteRecords moves the log
// start past the entry, the next sweep drops it, later stamps no longer
// carry it, and causal order still holds.
func TestTruncationSweep(t *testing.T) {
	broker.KfakeOnly(t, "fails a ListOffsets request through a kfake Control hook")
	e := newEnv(t, broker.Topic{Name: "u"}, broker.Topic{Name: "a"}, broker.Topic{Name: "b"}, broker.Topic{Name: "out"})
	out := NewTopic("out", String(), String())
	seen := &collector{}
	bld := Named("tr")
	for _, n := range []string{"a", "b"} {
		On(bld, NewTopic(n, String(), String()), func(m Message[string, string]) ([]Emission, error) {
			seen.add(m.Value)
			return []Emission{out.Send(m.Key, m.Value)}, nil
		})
	}
	st := bld.Into(out).MustBuild()
	e.changelogs(1, st)
	u := headers.Channel{Topic: e.topicID("u"), Partition: 0}
	for range 5 {
		e.produce(rec("u", 0, "k", "u"))
	}
	var s headers.Stamp
	s.Clock.SetOffset(u, 4)
	e.produce(stamped(t, "a", 0, "k", "a0", &s))

	clk := newManualClock()
	cfg := e.config("i1")
	cfg.WallClock = clk.Now
	cfg.TruncateInterval = time.Minute
	r := e.start(cfg, st)
	claimsU := func(rs []*kgo.Record) []bool {
		var out []bool
		for _, r := range rs {
			var s headers.Stamp
			if err := headers.ReadStamp(&s, r.Headers); err != nil {
				t.Fatal(err)
			}
			_, ok := s.Clock.Offset(u)
			out = append(out, ok)
		}
		return out
	}
	if got := claimsU(e.readExactly("out", 1, 20*time.Second)); !got[0] {
		t.Fatal("the first output does not carry the claim on u; the test proves nothing")
	}
	before, _ := stampWidth(r.app)

	// A sweep whose log-start query fails: skipped, counted, nothing dropped.
	var failed atomic.Bool
	e.c.Fake().ControlKey(kmsg.ListOffsets.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		lr := req.(*kmsg.ListOffsetsRequest)
		if len(lr.Topics) != 1 || lr.Topics[0].Topic != "u" {
			return nil, nil, false
		}
		resp := lr.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range lr.Topics {
			t := kmsg.NewListOffsetsResponseTopic()
			t.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				p := kmsg.NewListOffsetsResponseTopicPartition()
				p.Partition = rp.Partition
				p.ErrorCode = kerr.UnknownServerError.Code
				t.Partitions = append(t.Partitions, p)
			}
			resp.Topics = append(resp.Topics, t)
		}
		failed.Store(true)
		return resp, nil, true
	})
	clk.Advance(time.Minute)
	waitFor(t, 20*time.Second, "a skipped sweep", func() bool { _, sk := stampWidth(r.app); return sk == 1 })
	if w, _ := stampWidth(r.app); !failed.Load() || w != before {
		t.Fatalf("after the failed sweep: width %d (was %d), failure injected %v", w, before, failed.Load())
	}

	// Retention moves u's log start past the claimed offset.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var os kadm.Offsets
	os.Add(kadm.Offset{Topic: "u", Partition: 0, At: 5})
	if resp, err := e.c.Admin().DeleteRecords(ctx, os); err != nil || resp.Error() != nil {
		t.Fatalf("delete records: %v %v", err, resp.Error())
	}
	clk.Advance(time.Minute)
	waitFor(t, 20*time.Second, "the sweep to drop the entry", func() bool { w, _ := stampWidth(r.app); return w == before-1 })

	// Later traffic: stamps no longer claim u, and order holds.
	commitA := e.openTxn("a-writer", rec("a", 0, "k", "a1"))
	var s2 headers.Stamp
	s2.Clock.SetOffset(headers.Channel{Topic: e.topicID("a"), Partition: 0}, 1)
	e.produce(stamped(t, "b", 0, "k", "b0", &s2))
	waitFor(t, 20*time.Second, "b0 held", func() bool { return len(r.app.ExplainHolds()) == 1 })
	commitA()
	outs := e.readExactly("out", 3, 20*time.Second)
	if got := claimsU(outs); !slices.Equal(got, []bool{true, false, false}) {
		t.Fatalf("outputs claim u: %v, want only the first", got)
	}
	if got, want := seen.snapshot(), []string{"a0", "a1", "b0"}; !slices.Equal(got, want) {
		t.Fatalf("delivered %q, want %q", got, want)
	}
	if _, sk := stampWidth(r.app); sk != 1 {
		t.Fatalf("skipped sweeps %d, want 1", sk)
	}
}
