package stage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// wait500 is franz-go's log line when End commits a transaction without
// having learned that the broker has KIP-447: End then returns 500 ms late.
const wait500 = "sleeping 500ms before allowing a rebalance"

// capturedConfig is e.config(instance) with franz-go's log kept in cl.
func (e *env) capturedConfig(instance string, cl *clientLog) Config {
	cfg := e.config(instance)
	cfg.ClientOpts = []kgo.Opt{kgo.WithLogger(cl)}
	return cfg
}

// committedOffsets fetches the application group's committed offsets.
func (e *env) committedOffsets() kadm.OffsetResponses {
	e.t.Helper()
	offs, err := e.tryCommittedOffsets()
	if err != nil {
		e.t.Fatal(err)
	}
	return offs
}

// tryCommittedOffsets is committedOffsets returning the error; nil
// offsets and no error when the group has committed nothing yet.
func (e *env) tryCommittedOffsets() (kadm.OffsetResponses, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	offs, err := e.c.Admin().FetchOffsets(ctx, e.app)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return nil, nil
	}
	return offs, err
}

// TestFreshStartCommitsNoOffsetlessTransaction: a new application's first
// step builds its tasks, whose initial state goes to the changelog while
// nothing was consumed. Its transaction must still commit an offset, or
// franz-go holds the session for 500 ms and the first step with records
// waits it out (every new application, bridge and benchmark run). The
// offset it commits for a partition the group had none for is the log
// start the task started at, and nothing below it is processed.
func TestFreshStartCommitsNoOffsetlessTransaction(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := counterStage(in, out)
	e.changelogs(2, st)
	// Records gone before the application starts: both partitions'
	// logs start at 3, where they end.
	e.inputs("in", 6, 2, 2, 100)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var del kadm.Offsets
	del.Add(kadm.Offset{Topic: "in", Partition: 0, At: 3})
	del.Add(kadm.Offset{Topic: "in", Partition: 1, At: 3})
	if resp, err := e.c.Admin().DeleteRecords(ctx, del); err != nil || resp.Error() != nil {
		t.Fatalf("delete records: %v %v", err, resp)
	}

	cl := &clientLog{}
	r := e.start(e.capturedConfig("i1", cl), st)
	defer r.stop()
	// The build step's commit, before any record is consumed.
	anchored := func() (n int) {
		offs, err := e.tryCommittedOffsets()
		if err != nil {
			return 0 // a new group's coordinator may not be ready yet: ask again
		}
		for p := range int32(2) {
			if o, ok := offs.Lookup("in", p); ok && o.Err == nil {
				n++
				if o.At != 3 || o.Metadata != "i1" {
					t.Errorf("in[%d] committed at %d with metadata %q before anything was consumed, want its log start 3 and %q", p, o.At, o.Metadata, "i1")
				}
			}
		}
		return n
	}
	// Nothing has been produced to consume yet, so any offset committed now
	// is the anchor. Polled: a transactional offset is visible once the
	// broker has written the commit's markers, which on Kafka follows
	// EndTxn's answer (an offset fetch meanwhile answers
	// UNSTABLE_OFFSET_COMMIT).
	waitFor(t, 20*time.Second, "the first step's offset commit", func() bool { return anchored() > 0 })

	want := e.inputs("in", 10, 2, 2, 0)
	checkCounts(t, e.readExactly("out", 10, 30*time.Second), want)
	if cl.count("transaction session ending") == 0 {
		t.Fatal("franz-go logged no transaction end: the capture does not see the session")
	}
	if n := cl.count(wait500); n != 0 {
		t.Errorf("%d transactions committed without offsets (%q), want 0", n, wait500)
	}
	offs := e.committedOffsets()
	for p, end := range []int64{8, 8} {
		if o, _ := offs.Lookup("in", int32(p)); o.At != end {
			t.Errorf("in[%d] committed at %d, want its end %d", p, o.At, end)
		}
	}
}

// TestStartAtEndIsNotAnchored: a stage told to start where the log ends
// (ClientOpts, docs/operations.md: joining late) must not have its first
// step commit the log start for it: an instance that restarts, or takes the
// partition over, before a record arrives would then process the history
// the stage was told to skip.
func TestStartAtEndIsNotAnchored(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := counterStage(in, out)
	e.changelogs(2, st)
	e.inputs("in", 6, 2, 2, 100) // the history: offsets 0-2 of each partition
	atEnd := func(instance string) Config {
		cfg := e.config(instance)
		cfg.ClientOpts = []kgo.Opt{kgo.ConsumeStartOffset(kgo.NewOffset().AtEnd())}
		return cfg
	}

	r := e.start(atEnd("i1"), st)
	waitFor(t, 20*time.Second, "the first committed step", func() bool { return r.app.status.committed.Load() > 0 })
	offs := e.committedOffsets()
	for p := range int32(2) {
		if o, ok := offs.Lookup("in", p); ok && o.Err == nil && o.At < 3 {
			t.Errorf("in[%d] committed at %d before anything was consumed; the stage starts at the log end, 3", p, o.At)
		}
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}

	// Restarted before any record arrived: still only what comes now.
	r = e.start(atEnd("i1"), st)
	defer r.stop()
	waitFor(t, 20*time.Second, "the restarted instance's first step", func() bool { return r.app.status.committed.Load() > 0 })
	want := e.inputs("in", 4, 2, 2, 0)
	checkCounts(t, e.readExactly("out", 4, 30*time.Second), want)
}

// TestIdleTicksCommitNoOffsetlessTransaction: on an instance that consumes
// nothing, a step that emits only a tick commits the group's offset again,
// so franz-go does not hold the session for 500 ms after it. The offsets
// stay where the consumed records put them.
func TestIdleTicksCommitNoOffsetlessTransaction(t *testing.T) {
	ticks := TickTopic("app", "bal")
	e := newEnv(t, broker.Topic{Name: "in"}, broker.Topic{Name: "audits"}, broker.Topic{Name: ticks})
	st := auditStage()
	e.changelogs(1, st)
	e.produce(rec("in", 0, "a", "x"), rec("in", 0, "b", "y"))

	clk := newManualClock()
	t0 := clk.Now().UnixMilli()
	cl := &clientLog{}
	cfg := e.capturedConfig("i1", cl)
	cfg.WallClock = clk.Now
	a, err := New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	// The group's offset of in[0] after every committed step: a tick
	// step's commit must leave it as it was (franz-go would set a wrong
	// one right again at the next step that consumes).
	var inCommits []int64
	a.hooks.afterCommit = func() { // on the session loop: no t.Fatal
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		offs, err := e.c.Admin().FetchOffsets(ctx, e.app)
		if o, ok := offs.Lookup("in", 0); err == nil && ok {
			inCommits = append(inCommits, o.At)
		}
	}
	r := e.startApp(a)
	defer r.stop()
	e.readExactly("audits", 2, 20*time.Second)
	const n = 3
	for i := range uint64(n) {
		clk.Advance(time.Minute)
		waitFor(t, 20*time.Second, fmt.Sprintf("tick %d", i+1), func() bool { return tickCount(r.app) == i+1 })
	}
	got := values(e.readExactly("audits", 2+n, 20*time.Second))
	want := []string{"100", "100"}
	for i := range int64(n) {
		want = append(want, fmt.Sprintf("%d@%d", i+1, t0+(i+1)*time.Minute.Milliseconds()))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("audits %q, want %q", got, want)
	}
	// Every tick was consumed back from the tick topic.
	waitFor(t, 20*time.Second, "the ticks' offsets committed", func() bool {
		o, _ := e.committedOffsets().Lookup(ticks, 0)
		return o.At >= 2*n // a tick and its commit marker each
	})
	if o, _ := e.committedOffsets().Lookup("in", 0); o.At != 2 || o.Metadata != "i1" {
		t.Errorf("in[0] committed at %d with metadata %q, want 2 (its end) and %q", o.At, o.Metadata, "i1")
	}
	r.stop()
	for i, at := range inCommits {
		if at > 2 || (i > 0 && at < inCommits[i-1]) {
			t.Fatalf("in[0]'s offset went %v after the steps: past its end 2, or back", inCommits)
		}
	}
	if cl.count("transaction session ending") == 0 {
		t.Fatal("franz-go logged no transaction end: the capture does not see the session")
	}
	if n := cl.count(wait500); n != 0 {
		t.Errorf("%d transactions committed without offsets (%q), want 0", n, wait500)
	}
}

// TestIdleTickRate measures (PARSLEY_IDLE_TICKS=1) how many ticks an idle
// instance commits in 3 s at a 50 ms interval, on the real clock; at most
// 60 are due. It asserts nothing: docs/ticks.md quotes the figure.
func TestIdleTickRate(t *testing.T) {
	if os.Getenv("PARSLEY_IDLE_TICKS") == "" {
		t.Skip("a measurement: set PARSLEY_IDLE_TICKS=1")
	}
	e := newEnv(t, broker.Topic{Name: "in"}, broker.Topic{Name: "out"}, broker.Topic{Name: TickTopic("app", "s")})
	out := NewTopic("out", String(), String())
	bld := Named("s")
	On(bld, NewTopic("in", String(), String()), func(Message[string, string]) ([]Emission, error) { return nil, nil })
	bld.Ticks(50*time.Millisecond, func(Tick) ([]Emission, error) { return []Emission{out.Send("t", "tick")}, nil })
	st := bld.Into(out).MustBuild()
	e.changelogs(1, st)
	r := e.start(e.config("i1"), st)
	defer r.stop()
	waitFor(t, 20*time.Second, "the first committed step", func() bool { return r.app.status.committed.Load() > 0 })
	from := tickCount(r.app)
	time.Sleep(3 * time.Second)
	t.Logf("idle instance, 50 ms tick interval: %d ticks committed in 3 s", tickCount(r.app)-from)
}

// TestStartsAtLogStart: which ClientOpts leave a partition without a group
// offset starting at its log start, the one case the anchor may commit
// that start for: franz-go's default, and reset offsets that do not move
// the start; not a start, or a reset that also sets the start, elsewhere.
func TestStartsAtLogStart(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
		want bool
	}{
		{"no options", nil, true},
		{"unrelated options", []kgo.Opt{kgo.ClientID("x")}, true},
		{"reset to the log start", []kgo.Opt{kgo.ConsumeResetOffset(kgo.NewOffset().AtStart())}, true},
		{"reset by rewinding", []kgo.Opt{kgo.ConsumeResetOffset(kgo.RewindOffset(time.Minute))}, true},
		{"start at the log end", []kgo.Opt{kgo.ConsumeStartOffset(kgo.NewOffset().AtEnd())}, false},
		{"reset, and so start, at the log end", []kgo.Opt{kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd())}, false},
		{"start at a time", []kgo.Opt{kgo.ConsumeStartOffset(kgo.NewOffset().AfterMilli(1))}, false},
	} {
		if got := startsAtLogStart(tc.opts); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
