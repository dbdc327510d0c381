package stage

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRestartReportsStartPositions: a claim naming a transaction marker
// below the committed position must resolve after a restart. The first
// incarnation fetches a@0 (held: it claims c@0, not yet written) and the
// marker a@1 behind it; the position past the marker cannot fold while a@0
// is held. After a restart, c@0 releases a@0, and b@0 — which claims the
// marker a@1 — is delivered only because the new incarnation reported its
// start position on a (host duty H5).
func TestRestartReportsStartPositions(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "a"}, broker.Topic{Name: "b"}, broker.Topic{Name: "c"}, broker.Topic{Name: "out"})
	a, b, c := NewTopic("a", String(), String()), NewTopic("b", String(), String()), NewTopic("c", String(), String())
	out := NewTopic("out", String(), String())
	seen := &collector{}
	h := func(m Message[string, string]) ([]Emission, error) {
		seen.add(m.Topic)
		return []Emission{out.Send(m.Key, m.Topic)}, nil
	}
	st := On(On(On(Named("j"), a, h), b, h), c, h).Into(out).MustBuild()
	e.changelogs(1, st)
	cfg := e.config("i1")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// a@0 claims c@0, in a committed transaction: the marker is a@1.
	clkA := clock.New(e.c.Admin())
	if err := clkA.Produced(ctx, "c", 0, 0); err != nil {
		t.Fatal(err)
	}
	ra := rec("a", 0, "k", "a0")
	if err := clkA.Stamp(ctx, ra); err != nil {
		t.Fatal(err)
	}
	tp, err := e.c.NewClient(kgo.TransactionalID("a-writer"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	if err := tp.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := tp.ProduceSync(ctx, ra).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := tp.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}

	r := e.start(cfg, st)
	waitFor(t, 20*time.Second, "a@0 to be held", func() bool {
		for _, ti := range r.app.Tasks() {
			if ti.Held > 0 {
				return true
			}
		}
		return false
	})
	// Let the step that fetched the marker commit.
	waitFor(t, 20*time.Second, "the marker's offset to be committed", func() bool {
		offs, err := e.c.Admin().FetchOffsets(ctx, cfg.ApplicationID)
		if err != nil {
			return false
		}
		o, ok := offs.Lookup("a", 0)
		return ok && o.At == 2
	})
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}

	// b@0 claims the marker a@1; c@0 releases a@0.
	clkB := clock.New(e.c.Admin())
	if err := clkB.Produced(ctx, "a", 0, 1); err != nil {
		t.Fatal(err)
	}
	rb := rec("b", 0, "k", "b0")
	if err := clkB.Stamp(ctx, rb); err != nil {
		t.Fatal(err)
	}
	e.produce(rb, rec("c", 0, "k", "c0"))

	r = e.start(cfg, st)
	e.readExactly("out", 3, 20*time.Second)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if got := seen.snapshot(); !slices.Equal(got, []string{"c", "a", "b"}) {
		t.Fatalf("delivered %q, want c, a, b", got)
	}
}
