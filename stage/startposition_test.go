package stage

import (
	"slices"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
)

// TestStartPositionReleasesClaimOnTrailingMarker: a record on b claims a
// transaction marker on a. The incarnation that fetched the marker could
// not fold it (a's queue held a record then); after a restart nothing on a
// is fetched again, so only the starting position reported at build (host
// duty H2 at start) lets the claim resolve once a's queue drains.
func TestStartPositionReleasesClaimOnTrailingMarker(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "a"}, broker.Topic{Name: "b"}, broker.Topic{Name: "c"}, broker.Topic{Name: "out"})
	out := NewTopic("out", String(), String())
	seen := &collector{}
	bld := Named("s")
	for _, n := range []string{"a", "b", "c"} {
		On(bld, NewTopic(n, String(), String()), func(m Message[string, string]) ([]Emission, error) {
			seen.add(m.Value)
			return []Emission{out.Send(m.Key, m.Value)}, nil
		})
	}
	st := bld.Into(out).MustBuild()
	e.changelogs(1, st)
	ch := func(n string) headers.Channel { return headers.Channel{Topic: e.topicID(n), Partition: 0} }

	commitC := e.openTxn("c-writer", rec("c", 0, "k", "c0"))
	var s headers.Stamp
	s.Clock.SetOffset(ch("c"), 0)
	e.openTxn("a-writer", stamped(t, "a", 0, "k", "a0", &s))() // a@0, marker a@1
	s.Clock.Reset()
	s.Clock.SetOffset(ch("a"), 1) // the marker
	e.produce(stamped(t, "b", 0, "k", "b0", &s))

	r := e.start(e.config("i1"), st)
	waitFor(t, 20*time.Second, "a@0 and b@0 held", func() bool { return len(r.app.ExplainHolds()) == 2 })
	// Holds are published from committed state only.
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	r = e.start(e.config("i1"), st)
	waitFor(t, 20*time.Second, "the restored holds", func() bool { return len(r.app.ExplainHolds()) == 2 })
	commitC()
	waitFor(t, 20*time.Second, "c0, a0 and b0", func() bool { return seen.len() == 3 })
	if got, want := seen.snapshot(), []string{"c0", "a0", "b0"}; !slices.Equal(got, want) {
		t.Fatalf("delivered %q, want %q", got, want)
	}
}
