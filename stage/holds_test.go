package stage

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/protocol"
)

// TestExplainHoldsDiagnosesAndWarnsOnce constructs one hold of each of the
// four diagnoses on its own channel, checks ExplainHolds names each with
// its unmet claim and watermarks, that each hold warns exactly once after
// HoldWarningAfter, and that a new head on a channel is a new hold.
func TestExplainHoldsDiagnosesAndWarnsOnce(t *testing.T) {
	srcs := []string{"o", "nf", "hu", "x", "su", "sb"}
	var bts []broker.Topic
	for _, n := range append(slices.Clone(srcs), "out") {
		bts = append(bts, broker.Topic{Name: n})
	}
	e := newEnv(t, bts...)
	out := NewTopic("out", String(), String())
	seen := &collector{}
	b := Named("diag")
	for _, n := range srcs {
		On(b, NewTopic(n, String(), String()), func(m Message[string, string]) ([]Emission, error) {
			seen.add(fmt.Sprintf("%s@%d", m.Topic, m.Offset))
			return []Emission{out.Send(m.Key, m.Topic)}, nil
		})
	}
	st := b.Into(out).MustBuild()
	e.changelogs(1, st)

	ids := map[string]headers.TopicID{}
	for _, n := range srcs {
		ids[n] = e.topicID(n)
	}
	ch := func(n string) headers.Channel { return headers.Channel{Topic: ids[n], Partition: 0} }
	senderS, senderU := headers.SenderID{1}, headers.SenderID{2}

	// Two open transactions on o: o@0, o@1.
	commitO0 := e.openTxn("o-writer-0", rec("o", 0, "k", "o0"))
	commitO1 := e.openTxn("o-writer-1", rec("o", 0, "k", "o1"))
	// x@0 from sender S, seq 0: delivered at once.
	e.produce(stamped(t, "x", 0, "k", "x0", &headers.Stamp{Tagged: true, Sender: senderS, Seq: 0}))
	// nf@0 claims o@0 and nf@1 claims o@1: not fetched.
	var s headers.Stamp
	s.Clock.SetOffset(ch("o"), 0)
	nf0 := stamped(t, "nf", 0, "k", "nf0", &s)
	s.Clock.SetOffset(ch("o"), 1)
	e.produce(nf0, stamped(t, "nf", 0, "k", "nf1", &s))
	// hu@0 claims nf@0, fetched here and held itself.
	s.Clock.Reset()
	s.Clock.SetOffset(ch("nf"), 0)
	e.produce(stamped(t, "hu", 0, "k", "hu0", &s))
	// su@0 claims a send of sender U on x, which never wrote x.
	s.Clock.Reset()
	s.Clock.SetSeq(ch("x"), senderU, 0)
	e.produce(stamped(t, "su", 0, "k", "su0", &s))
	// sb@0 claims sender S's seq 5 on x; only seq 0 was delivered.
	s.Clock.Reset()
	s.Clock.SetSeq(ch("x"), senderS, 5)
	e.produce(stamped(t, "sb", 0, "k", "sb0", &s))

	clk := newManualClock()
	logs := &logCapture{}
	cfg := e.config("i1")
	cfg.Logger = slog.New(logs)
	cfg.WallClock = clk.Now
	cfg.HoldWarningAfter = 10 * time.Second
	r := e.start(cfg, st)

	byTopic := func(hs []HeldRecord) map[string]HeldRecord {
		m := map[string]HeldRecord{}
		for _, h := range hs {
			m[h.Topic] = h
		}
		return m
	}
	var holds []HeldRecord
	waitFor(t, 20*time.Second, "four holds", func() bool {
		holds = r.app.ExplainHolds()
		return len(holds) == 4
	})
	if got := seen.snapshot(); !slices.Equal(got, []string{"x@0"}) {
		t.Fatalf("delivered %q, want only x@0", got)
	}
	hs := byTopic(holds)
	want := map[string]protocol.Diagnosis{
		"nf": protocol.NotFetched, "hu": protocol.HeldUpstream,
		"su": protocol.SenderUnseen, "sb": protocol.SenderBehind,
	}
	for topic, d := range want {
		h, ok := hs[topic]
		if !ok {
			t.Fatalf("no hold on %s; holds: %+v", topic, holds)
		}
		if h.Diagnosis != d || len(h.Waiting) != 1 || h.Waiting[0].Diagnosis != d {
			t.Errorf("%s: diagnosis %v, waiting %+v; want %v", topic, h.Diagnosis, h.Waiting, d)
		}
		if h.Stage != "diag" || h.Partition != 0 || h.Offset != 0 || h.Coordinate.Channel != ch(topic) {
			t.Errorf("%s: hold names %s task %d %v@%d", topic, h.Stage, h.Partition, h.Coordinate, h.Offset)
		}
		if !strings.Contains(h.Summary(), d.String()) {
			t.Errorf("%s: summary %q lacks %s", topic, h.Summary(), d)
		}
	}
	if h := hs["nf"]; h.Depth != 2 || h.Waiting[0].Topic != "o" || h.Waiting[0].Offset != 0 || h.Waiting[0].Position > 0 {
		t.Errorf("nf: depth %d, waiting %+v; want depth 2, o offset 0 at or above the position", h.Depth, h.Waiting)
	}
	if w := hs["hu"].Waiting[0]; w.Topic != "nf" || w.Offset != 0 || w.Frontier != -1 || w.Position != 2 {
		t.Errorf("hu: waiting %+v; want nf offset 0, frontier -1, position 2", w)
	}
	if w := hs["su"].Waiting[0]; !w.Sequence || w.Sender != senderU || w.Seq != 0 || w.DeliveredSeq != -1 {
		t.Errorf("su: waiting %+v; want sender U seq 0, nothing delivered", w)
	}
	if w := hs["sb"].Waiting[0]; !w.Sequence || w.Sender != senderS || w.Seq != 5 || w.DeliveredSeq != 0 {
		t.Errorf("sb: waiting %+v; want sender S seq 5, delivered seq 0", w)
	}

	// Below the threshold nothing warns; past it each hold warns once.
	clk.Advance(9 * time.Second)
	time.Sleep(300 * time.Millisecond)
	if w := logs.holdWarnings(); len(w) != 0 {
		t.Fatalf("warned before HoldWarningAfter: %v", w)
	}
	clk.Advance(2 * time.Second)
	waitFor(t, 10*time.Second, "four hold warnings", func() bool { return len(logs.holdWarnings()) >= 4 })
	for range 3 {
		clk.Advance(time.Minute)
		time.Sleep(150 * time.Millisecond)
	}
	warns := logs.holdWarnings()
	codes := map[string]string{}
	for _, w := range warns {
		codes[w["topic"]+"@"+w["offset"]] += w["code"]
	}
	wantCodes := map[string]string{
		"nf@0": "vc-hold-not-fetched", "hu@0": "vc-hold-held-upstream",
		"su@0": "vc-hold-sender-unseen", "sb@0": "vc-hold-sender-behind",
	}
	if len(warns) != 4 || !mapsEqual(codes, wantCodes) {
		t.Fatalf("warnings %v, want one per hold: %v", codes, wantCodes)
	}
	for _, h := range r.app.ExplainHolds() {
		if h.HeldFor < 3*time.Minute {
			t.Errorf("%s held for %v, want ≥ 3m by the injected clock", h.Topic, h.HeldFor)
		}
	}

	// o@0 commits: nf@0 and then hu@0 deliver; nf@1 is a new head, a new
	// hold, and warns again once.
	commitO0()
	waitFor(t, 20*time.Second, "o@0, nf@0 and hu@0", func() bool { return seen.len() == 4 })
	waitFor(t, 10*time.Second, "nf@1 as the new head", func() bool {
		h, ok := byTopic(r.app.ExplainHolds())["nf"]
		return ok && h.Offset == 1
	})
	holds = r.app.ExplainHolds()
	if len(holds) != 3 || holds[2].Topic != "nf" || holds[2].HeldFor >= time.Second {
		t.Fatalf("holds %+v; want su and sb first, then the fresh nf@1", holds)
	}
	clk.Advance(11 * time.Second)
	waitFor(t, 10*time.Second, "the new hold's warning", func() bool { return len(logs.holdWarnings()) == 5 })
	clk.Advance(time.Minute)
	time.Sleep(300 * time.Millisecond)
	if w := logs.holdWarnings(); len(w) != 5 || w[4]["topic"] != "nf" || w[4]["offset"] != "1" || w[4]["code"] != "vc-hold-not-fetched" {
		t.Fatalf("warnings after the new head: %v", w)
	}
	commitO1()
	waitFor(t, 20*time.Second, "o@1 and nf@1", func() bool { return seen.len() == 6 })
	if got, want := seen.snapshot(), []string{"x@0", "o@0", "nf@0", "hu@0", "o@1", "nf@1"}; !slices.Equal(got, want) {
		t.Fatalf("delivered %q, want %q", got, want)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestHoldWarningDisabled: a negative HoldWarningAfter never warns.
func TestHoldWarningDisabled(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "a"}, broker.Topic{Name: "b"}, broker.Topic{Name: "out"})
	out := NewTopic("out", String(), String())
	b := Named("s")
	for _, n := range []string{"a", "b"} {
		On(b, NewTopic(n, String(), String()), func(m Message[string, string]) ([]Emission, error) {
			return []Emission{out.Send(m.Key, m.Value)}, nil
		})
	}
	st := b.Into(out).MustBuild()
	e.changelogs(1, st)
	var s headers.Stamp
	s.Clock.SetOffset(headers.Channel{Topic: e.topicID("a"), Partition: 0}, 0)
	e.produce(stamped(t, "b", 0, "k", "b0", &s))
	clk := newManualClock()
	logs := &logCapture{}
	cfg := e.config("i1")
	cfg.Logger, cfg.WallClock, cfg.HoldWarningAfter = slog.New(logs), clk.Now, -1
	r := e.start(cfg, st)
	waitFor(t, 20*time.Second, "the hold", func() bool { return len(r.app.ExplainHolds()) == 1 })
	clk.Advance(time.Hour)
	time.Sleep(300 * time.Millisecond)
	if h := r.app.ExplainHolds(); len(h) != 1 || h[0].HeldFor < time.Hour {
		t.Fatalf("holds %+v; want the hold, an hour old", h)
	}
	if w := logs.holdWarnings(); len(w) != 0 {
		t.Fatalf("warned with warnings disabled: %v", w)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestHoldOutlivesAbortedSteps: aborted steps rebuild the task's node, but
// the hold they find again is the same hold: it keeps its age, does not
// warn again, and aborted deliveries are not counted.
func TestHoldOutlivesAbortedSteps(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "a"}, broker.Topic{Name: "b"}, broker.Topic{Name: "c"}, broker.Topic{Name: "out"})
	out := NewTopic("out", String(), String())
	bld := Named("s")
	for _, n := range []string{"a", "b", "c"} {
		On(bld, NewTopic(n, String(), String()), func(m Message[string, string]) ([]Emission, error) {
			return []Emission{out.Send(m.Key, m.Value)}, nil
		})
	}
	st := bld.Into(out).MustBuild()
	e.changelogs(1, st)
	var s headers.Stamp
	s.Clock.SetOffset(headers.Channel{Topic: e.topicID("a"), Partition: 0}, 0)
	e.produce(stamped(t, "b", 0, "k", "b0", &s))
	clk := newManualClock()
	logs := &logCapture{}
	cfg := e.config("i1")
	cfg.Logger, cfg.WallClock, cfg.HoldWarningAfter = slog.New(logs), clk.Now, 10*time.Second
	a, err := New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	var aborts atomic.Int64
	abortNext := atomic.Int64{}
	a.hooks.beforeEnd = func(int64) bool {
		if abortNext.Load() > 0 {
			abortNext.Add(-1)
			aborts.Add(1)
			return true
		}
		return false
	}
	r := e.startApp(a)
	var since time.Time
	waitFor(t, 20*time.Second, "the hold", func() bool {
		hs := r.app.ExplainHolds()
		if len(hs) == 1 {
			since = hs[0].Since
		}
		return len(hs) == 1
	})
	clk.Advance(11 * time.Second)
	waitFor(t, 10*time.Second, "the warning", func() bool { return len(logs.holdWarnings()) == 1 })

	abortNext.Store(3)
	e.produce(rec("c", 0, "k", "c0"))
	e.readExactly("out", 1, 20*time.Second)
	if aborts.Load() != 3 {
		t.Fatalf("%d steps aborted, want 3", aborts.Load())
	}
	clk.Advance(time.Minute)
	time.Sleep(300 * time.Millisecond)
	hs := r.app.ExplainHolds()
	if len(hs) != 1 || !hs[0].Since.Equal(since) {
		t.Fatalf("holds after aborted steps %+v; want the same hold, since %v", hs, since)
	}
	if w := logs.holdWarnings(); len(w) != 1 {
		t.Fatalf("%d warnings, want the one", len(w))
	}
	snap := r.app.status.snap.Load()
	if len(snap.tasks) != 1 || snap.tasks[0].delivered != 1 {
		t.Fatalf("delivered %+v, want c0 counted once", snap.tasks)
	}
	if n := r.app.status.aborts.Load(); n < 3 {
		t.Fatalf("step aborts metric %d, want ≥ 3", n)
	}
}
