package stage

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kgo"
)

// tickCount reads the committed ticks of every task from the snapshot.
func tickCount(a *App) uint64 {
	var n uint64
	if s := a.status.snap.Load(); s != nil {
		for _, t := range s.tasks {
			n += t.ticks
		}
	}
	return n
}

// TestTicksFoldOnScheduleAndAcrossRestart: a stateful stage folds its ticks
// over the reserved tick slot. Ticks come one per interval of the injected
// clock, carry that clock's time, keep their state apart from the nil key's
// and keep it across a restart.
func TestTicksFoldOnScheduleAndAcrossRestart(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in"}, broker.Topic{Name: "audits"}, broker.Topic{Name: TickTopic("app", "bal")})
	st := auditStage()
	e.changelogs(1, st)
	e.produce(kgoRecordNilKey{"in", "x"}.rec())

	clk := newManualClock()
	t0 := clk.Now().UnixMilli()
	cfg := e.config("i1")
	cfg.WallClock = clk.Now
	r := e.start(cfg, st)
	e.readExactly("audits", 1, 20*time.Second)
	if n := tickCount(r.app); n != 0 {
		t.Fatalf("%d ticks before the interval passed", n)
	}
	clk.Advance(time.Minute)
	waitFor(t, 20*time.Second, "the first tick", func() bool { return tickCount(r.app) == 1 })
	clk.Advance(time.Minute)
	waitFor(t, 20*time.Second, "the second tick", func() bool { return tickCount(r.app) == 2 })
	got := values(e.readExactly("audits", 3, 20*time.Second))
	want := []string{"100", fmt.Sprintf("1@%d", t0+60000), fmt.Sprintf("2@%d", t0+120000)}
	if !slices.Equal(got, want) {
		t.Fatalf("audits %q, want %q", got, want)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}

	r = e.start(cfg, st)
	waitFor(t, 20*time.Second, "the restarted task", func() bool { ok, _ := r.app.Readiness(); return ok })
	clk.Advance(time.Minute)
	want = append(want, fmt.Sprintf("3@%d", t0+180000))
	if got := values(e.readExactly("audits", 4, 20*time.Second)); !slices.Equal(got, want) {
		t.Fatalf("after restart audits %q, want %q", got, want)
	}
}

// auditStage is the stateful stage "bal": it folds each key's records of
// "in" (+100) and its ticks (+1, every minute) and writes every new state
// to "audits", a tick's as state@time in Unix milliseconds.
func auditStage() *Stage {
	in := NewTopic("in", String(), String())
	audits := NewTopic("audits", String(), String())
	b := WithState(Named("bal"), JSON[int64](), 0)
	OnFold(b, in, func(s int64, m Message[string, string]) (Step[int64], error) {
		return Next(s+100, audits.Send("in", fmt.Sprint(s+100))), nil
	})
	TicksFold(b, time.Minute, func(s int64, tk Tick) (Step[int64], error) {
		return Next(s+1, audits.Send("tick", fmt.Sprintf("%d@%d", s+1, tk.Time.UnixMilli()))), nil
	})
	return b.Into(audits).MustBuild()
}

type kgoRecordNilKey struct{ topic, value string }

func (k kgoRecordNilKey) rec() *kgo.Record {
	r := rec(k.topic, 0, "", k.value)
	r.Key = nil
	return r
}

// TestTickHeldBehindHeldRecord: a tick emitted while a record is held
// claims that record's cause, so it is held too until the cause arrives.
func TestTickHeldBehindHeldRecord(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "a"}, broker.Topic{Name: "b"}, broker.Topic{Name: "out"}, broker.Topic{Name: TickTopic("app", "s")})
	out := NewTopic("out", String(), String())
	seen := &collector{}
	bld := Named("s")
	for _, n := range []string{"a", "b"} {
		On(bld, NewTopic(n, String(), String()), func(m Message[string, string]) ([]Emission, error) {
			seen.add(m.Value)
			return nil, nil
		})
	}
	bld.Ticks(time.Second, func(Tick) ([]Emission, error) {
		seen.add("tick")
		return []Emission{out.Send("t", "tick")}, nil
	})
	st := bld.Into(out).MustBuild()
	e.changelogs(1, st)
	commitA := e.openTxn("a-writer", rec("a", 0, "k", "a0"))
	var s headers.Stamp
	s.Clock.SetOffset(headers.Channel{Topic: e.topicID("a"), Partition: 0}, 0)
	e.produce(stamped(t, "b", 0, "k", "b0", &s))

	clk := newManualClock()
	cfg := e.config("i1")
	cfg.WallClock = clk.Now
	r := e.start(cfg, st)
	waitFor(t, 20*time.Second, "b0 held", func() bool { return len(r.app.ExplainHolds()) == 1 })
	clk.Advance(time.Second)
	waitFor(t, 20*time.Second, "the tick emitted", func() bool { return tickCount(r.app) == 1 })
	var tickHold *HeldRecord
	waitFor(t, 20*time.Second, "the tick held", func() bool {
		for _, h := range r.app.ExplainHolds() {
			if h.Topic == TickTopic("app", "s") {
				tickHold = &h
				return true
			}
		}
		return false
	})
	if tickHold.Diagnosis != protocol.NotFetched || tickHold.Waiting[0].Topic != "a" || tickHold.Waiting[0].Offset != 0 {
		t.Fatalf("tick hold %+v; want not fetched, waiting on a@0", tickHold)
	}
	if n := seen.len(); n != 0 {
		t.Fatalf("delivered %q while a0 was uncommitted", seen.snapshot())
	}
	commitA()
	waitFor(t, 20*time.Second, "a0, b0 and the tick", func() bool { return seen.len() == 3 })
	if got := seen.snapshot(); got[0] != "a0" || !slices.Contains(got, "tick") || !slices.Contains(got, "b0") {
		t.Fatalf("delivered %q; a0 must come first", got)
	}
	e.readExactly("out", 1, 20*time.Second)
}

// TestTickTopicChecks: a missing tick topic, one whose partition count
// differs from the widest source, and a stage consuming another stage's
// tick topic are refused before anything runs.
func TestTickTopicChecks(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2},
		broker.Topic{Name: TickTopic("app", "narrow"), Partitions: 1})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	noop := func(Tick) ([]Emission, error) { return nil, nil }
	pass := func(m Message[string, string]) ([]Emission, error) { return nil, nil }
	missing := On(Named("missing"), in, pass).Ticks(time.Second, noop).Into(out).MustBuild()
	narrow := On(Named("narrow"), in, pass).Ticks(time.Second, noop).Into(out).MustBuild()
	e.changelogs(2, missing, narrow)
	for _, tc := range []struct {
		st   *Stage
		want string
	}{
		{missing, `missing tick topic "app-missing-ticks"`},
		{narrow, `tick topic "app-narrow-ticks" has 1 partitions, its widest source has 2`},
	} {
		a, err := New(e.config("i1"), tc.st)
		if err != nil {
			t.Fatal(err)
		}
		err = a.Run(t.Context())
		if !errors.Is(err, ErrTopology) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Run = %v, want ErrTopology naming %s", tc.st.Name(), err, tc.want)
		}
	}
	thief := On(Named("thief"), NewTopic(TickTopic("app", "narrow"), String(), String()), pass).Into(out).MustBuild()
	if _, err := New(e.config("i1"), narrow, thief); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), `stage "thief" consumes "app-narrow-ticks"`) {
		t.Errorf("New with a stage consuming a tick topic = %v", err)
	}
	if _, err := Named("x").Ticks(0, noop).Build(); !errors.Is(err, ErrInvalidStage) {
		t.Errorf("zero tick interval: %v", err)
	}
	b := WithState(Named("y"), JSON[int64](), 0)
	On(b, in, pass)
	if _, err := TicksFold(b, time.Second, func(s string, _ Tick) (Step[string], error) { return Next(s), nil }).Into(out).Build(); !errors.Is(err, ErrInvalidStage) || !strings.Contains(err.Error(), "tick fold has state type string") {
		t.Errorf("tick fold of the wrong state type: %v", err)
	}
}
