package observer_test

import (
	"context"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/broker"
	"github.com/parsley-go/parsley/internal/obsdemo"
	"github.com/parsley-go/parsley/observer"
)

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// scan runs one observer pass over every topic of c into a fresh store
// and returns the store and the observer.
func scan(t *testing.T, ctx context.Context, c *broker.Cluster) (*observer.Store, *observer.Observer) {
	t.Helper()
	st, err := observer.OpenStore(ctx, filepath.Join(t.TempDir(), "obs.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	o, err := observer.New(observer.Config{Seeds: c.Addrs(), Pattern: regexp.MustCompile(".*")}, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(o.Close)
	if err := o.Scan(ctx); err != nil {
		t.Fatal(err)
	}
	return st, o
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

func builder(t *testing.T, c *broker.Cluster) *obsdemo.Builder {
	b, err := obsdemo.NewBuilder(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

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
	ctx := ctxFor(t)
	c := broker.New(t)
	b := builder(t, c)
	want, err := b.Faulty(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, o := scan(t, ctx, c)
	fs := findings(t, ctx, o)
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
	for _, c := range observer.Codes {
		if !codes[c] {
			t.Errorf("no finding of code %s", c)
		}
	}
}
