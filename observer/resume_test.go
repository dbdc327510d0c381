package observer_test

import (
	"path/filepath"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/obsdemo"
	"github.com/parsley-go/parsley/observer"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestResumeAfterRestart scans, closes everything, produces more, and scans
// again with the same store: nothing is stored twice, sender state
// survives (a gap straddling the restart is found), and a run of records
// carrying one unchanged claim stays whole across the restart.
func TestResumeAfterRestart(t *testing.T) {
	ctx := ctxFor(t)
	c := broker.New(t)
	b := builder(t, c)
	if err := b.Create(ctx, 1, "base", "gap", "fan"); err != nil {
		t.Fatal(err)
	}
	base, err := b.Stamped(ctx, "base", 0, &headers.Stamp{})
	if err != nil {
		t.Fatal(err)
	}
	same := &headers.Stamp{}
	same.Clock.SetOffset(base.Channel, base.Offset)
	var fan []headers.Coordinate
	produce := func(seqs ...int64) {
		for _, seq := range seqs {
			if _, err := b.Stamped(ctx, "gap", 0, &headers.Stamp{Tagged: true, Sender: obsdemo.GapSender, Seq: seq}); err != nil {
				t.Fatal(err)
			}
			f, err := b.Stamped(ctx, "fan", 0, same) // a producer that does not fold its own sends
			if err != nil {
				t.Fatal(err)
			}
			fan = append(fan, f)
		}
	}
	path := filepath.Join(t.TempDir(), "obs.db")
	pass := func() ([]observer.Finding, *observer.Store) {
		st, err := observer.OpenStore(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		o, err := observer.New(observer.Config{Brokers: c.Addrs(), Pattern: regexp.MustCompile("^(base|gap|fan)$")}, st)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		if err := o.Scan(ctx); err != nil {
			t.Fatal(err)
		}
		fs, err := o.Findings(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return fs, st
	}
	produce(1, 2)
	if fs, st := pass(); len(fs) != 0 {
		t.Fatalf("first pass: %v", fs)
	} else {
		st.Close()
	}
	produce(4, 5)
	fs, st := pass()
	if len(fs) != 1 || fs[0].Code != observer.CodeSequenceGap || fs[0].Coordinates[0] != b.At("gap", 0, 2).String() || fs[0].Coordinates[1] != b.At("gap", 0, 1).String() {
		t.Fatalf("after restart: %v, want one sequence gap between gap@1 and gap@2", fs)
	}
	var n int
	if err := st.DB().QueryRowContext(ctx, `SELECT count(*) FROM records`).Scan(&n); err != nil || n != 9 {
		t.Errorf("%d records stored (%v), want 9: each once", n, err)
	}
	// One claim row indexes the whole run, across the restart.
	if err := st.DB().QueryRowContext(ctx, `SELECT count(*) FROM claims`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d claim rows (%v), want 1: the run's first record", n, err)
	}
	d, err := st.Descendants(ctx, base, observer.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, nd := range d.Nodes[1:] {
		got = append(got, nd.ID)
	}
	var want []string
	for _, f := range fan {
		want = append(want, f.String())
	}
	if !slices.Equal(got, want) {
		t.Errorf("descendants of %s: %v, want every fan record %v", base, got, want)
	}
}

// TestStartPoints: a channel without a stored position starts at the log
// start, at the end, or at the first record at or after a time.
func TestStartPoints(t *testing.T) {
	ctx := ctxFor(t)
	c := broker.New(t)
	b := builder(t, c)
	if err := b.Create(ctx, 1, "log"); err != nil {
		t.Fatal(err)
	}
	var at []headers.Coordinate
	var mid time.Time
	for i := range 4 {
		if i == 2 {
			time.Sleep(20 * time.Millisecond)
			mid = time.Now()
			time.Sleep(20 * time.Millisecond)
		}
		c, err := b.Stamped(ctx, "log", 0, &headers.Stamp{})
		if err != nil {
			t.Fatal(err)
		}
		at = append(at, c)
	}
	for _, tc := range []struct {
		name string
		cfg  observer.Config
		want int // first stored index
	}{
		{"start", observer.Config{}, 0},
		{"end", observer.Config{Start: observer.FromEnd}, 4},
		{"time", observer.Config{StartTime: mid}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, _ := scanWith(t, ctx, c, tc.cfg)
			for i, a := range at {
				_, err := st.Record(ctx, a)
				if stored := err == nil; stored != (i >= tc.want) {
					t.Errorf("record %d stored %v, want stored from %d on", i, stored, tc.want)
				}
			}
		})
	}
}

// TestInternalTopicsAreNeverObserved: a pattern matching everything
// leaves out topics whose names start with "__".
func TestInternalTopicsAreNeverObserved(t *testing.T) {
	ctx := ctxFor(t)
	c := broker.New(t)
	b := builder(t, c)
	if err := b.Create(ctx, 1, "__hidden", "visible"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"__hidden", "visible"} {
		if _, err := b.Stamped(ctx, name, 0, &headers.Stamp{}); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := scan(t, ctx, c)
	ts, err := st.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, x := range ts {
		names = append(names, x.Name)
	}
	if !slices.Equal(names, []string{"visible"}) {
		t.Errorf("observed topics %v, want only [visible]", names)
	}
}

// TestRecreatedTopicIsANewChannel: a topic deleted and recreated under the
// same name is a new channel; after a restart the observer stores the new
// incarnation's records under its new topic ID and keeps the old ones.
func TestRecreatedTopicIsANewChannel(t *testing.T) {
	ctx := ctxFor(t)
	c := broker.New(t)
	b := builder(t, c)
	if err := b.Create(ctx, 1, "re"); err != nil {
		t.Fatal(err)
	}
	old, err := b.Stamped(ctx, "re", 0, &headers.Stamp{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "obs.db")
	pass := func() *observer.Store {
		st, err := observer.OpenStore(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		o, err := observer.New(observer.Config{Brokers: c.Addrs(), Topics: []string{"re"}}, st)
		if err != nil {
			t.Fatal(err)
		}
		defer o.Close()
		if err := o.Scan(ctx); err != nil {
			t.Fatal(err)
		}
		return st
	}
	pass().Close()
	if err := c.DeleteTopics(ctx, "re"); err != nil {
		t.Fatal(err)
	}
	if err := b.Create(ctx, 1, "re"); err != nil {
		t.Fatal(err)
	}
	if b.ID("re") == old.Topic {
		t.Fatal("recreated topic kept its ID")
	}
	b2 := builder(t, c) // a producer that never knew the old incarnation
	if err := b2.Create(ctx, 1, "re-unused"); err != nil {
		t.Fatal(err)
	}
	hs, _ := headers.AppendStamp([]kgo.RecordHeader(nil), &headers.Stamp{}, headers.DialectVC)
	got, err := b2.Produce(ctx, "re", 0, hs)
	if err != nil {
		t.Fatal(err)
	}
	fresh := b.At("re", 0, got.Offset)
	st := pass()
	for _, at := range []headers.Coordinate{old, fresh} {
		if _, err := st.Record(ctx, at); err != nil {
			t.Errorf("record %s: %v", at, err)
		}
	}
}
