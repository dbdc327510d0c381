package observer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/obsdemo"
	"github.com/parsley-go/parsley/internal/rig/obstest"
	"github.com/parsley-go/parsley/observer"
)

func ctxFor(t *testing.T) context.Context { return obstest.Ctx(t) }

// scan runs one observer pass over every topic of c into a fresh store
// and returns the store and the observer.
func scan(t *testing.T, ctx context.Context, c *broker.Cluster) (*observer.Store, *observer.Observer) {
	t.Helper()
	return obstest.Scan(t, ctx, c, observer.Config{})
}

func scanWith(t *testing.T, ctx context.Context, c *broker.Cluster, cfg observer.Config) (*observer.Store, *observer.Observer) {
	t.Helper()
	return obstest.Scan(t, ctx, c, cfg)
}

func findings(t *testing.T, ctx context.Context, o *observer.Observer) []observer.Finding {
	t.Helper()
	offs, err := o.Offsets(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fs, err := o.Store().Findings(ctx, offs)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func builder(t *testing.T, c *broker.Cluster) *obsdemo.Builder { return obstest.Builder(t, c) }

func TestCleanTopologyHasNoFindings(t *testing.T) {
	ctx := ctxFor(t)
	c := broker.New(t)
	b := builder(t, c)
	ships, err := b.Clean(ctx, 60)
	if err != nil {
		t.Fatal(err)
	}
	st, o := scan(t, ctx, c)
	if fs := findings(t, ctx, o); len(fs) != 0 {
		for _, f := range fs {
			t.Errorf("unexpected finding: %s", f)
		}
	}
	// The graph is really there: the last shipment descends from orders.
	rec, err := st.Record(ctx, ships[len(ships)-1])
	if err != nil {
		t.Fatal(err)
	}
	if !rec.Stamped || rec.Offsets != 3 {
		t.Fatalf("last shipment: stamped=%v offset entries=%d, want stamped with 3 (both order partitions and its own channel)", rec.Stamped, rec.Offsets)
	}
}

func TestFaultyTopologyProducesEachFinding(t *testing.T) {
	for _, uncommitted := range []bool{false, true} {
		t.Run(fmt.Sprintf("read_uncommitted=%v", uncommitted), func(t *testing.T) { testFaulty(t, uncommitted) })
	}
}

func testFaulty(t *testing.T, uncommitted bool) {
	ctx := ctxFor(t)
	c := broker.New(t)
	b := builder(t, c)
	want, err := b.Faulty(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st, o := scanWith(t, ctx, c, observer.Config{ReadUncommitted: uncommitted})
	fs := findings(t, ctx, o)
	// The aborted record is invisible to read_committed, and stored as
	// aborted when reading uncommitted; either way a claim on it is
	// unsettleable.
	aborted := want[3].Coordinates[1]
	ref, _ := observer.ParseRef(aborted)
	rec, err := st.Record(ctx, headers.Coordinate{Channel: headers.Channel{Topic: ref.ID, Partition: ref.Partition}, Offset: ref.Offset})
	switch {
	case !uncommitted && !errors.Is(err, observer.ErrNotFound):
		t.Errorf("read_committed stored the aborted record %s: %v", aborted, err)
	case uncommitted && (err != nil || !rec.Aborted):
		t.Errorf("read_uncommitted: aborted record %s: %+v, %v; want stored as aborted", aborted, rec, err)
	}
	reason := "an aborted or skipped record"
	if uncommitted {
		reason = "a record of an aborted transaction"
	}
	for _, f := range fs {
		if f.Code == observer.CodeUnsettleableClaim && f.Coordinates[1] == aborted && !strings.Contains(f.Summary, reason) {
			t.Errorf("claim on the aborted record: %q, want the reason %q", f.Summary, reason)
		}
		if f.Code == observer.CodeUnsettleableClaim && f.Coordinates[1] == want[2].Coordinates[1] && !strings.Contains(f.Summary, "a transaction marker") {
			t.Errorf("claim on the commit marker: %q, want it named a transaction marker", f.Summary)
		}
	}
	var got []obsdemo.Want
	for _, f := range fs {
		got = append(got, obsdemo.Want{Code: string(f.Code), Coordinates: f.Coordinates})
		if f.Summary == "" || f.Action == "" || f.Severity == 0 {
			t.Errorf("finding %s lacks summary, action or severity", f)
		}
	}
	key := func(w obsdemo.Want) string { return w.Code + " " + strings.Join(w.Coordinates, " ") }
	var gotK, wantK []string
	for _, w := range got {
		gotK = append(gotK, key(w))
	}
	for _, w := range want {
		wantK = append(wantK, key(w))
	}
	slices.Sort(gotK)
	slices.Sort(wantK)
	if !slices.Equal(gotK, wantK) {
		t.Errorf("findings:\n got  %s\n want %s", strings.Join(gotK, "\n      "), strings.Join(wantK, "\n      "))
		for _, f := range fs {
			t.Log(f)
		}
	}
	codes := map[observer.Code]bool{}
	for _, f := range fs {
		codes[f.Code] = true
	}
	for _, c := range observer.AllCodes() {
		if !codes[c] {
			t.Errorf("no finding of code %s", c)
		}
	}
}
