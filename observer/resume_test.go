package observer_test

import (
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/broker"
	"github.com/parsley-go/parsley/internal/obsdemo"
	"github.com/parsley-go/parsley/observer"
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
		o, err := observer.New(observer.Config{Seeds: c.Addrs(), Pattern: regexp.MustCompile("^(base|gap|fan)$")}, st)
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
