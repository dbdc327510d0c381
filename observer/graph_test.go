package observer_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/obsdemo"
	"github.com/parsley-go/parsley/observer"
)

func TestAncestryAndDescendants(t *testing.T) {
	ctx := ctxFor(t)
	c := broker.New(t)
	b := builder(t, c)
	const n = 12
	ships, err := b.Clean(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := scan(t, ctx, c)
	last := ships[n-1]

	g, err := st.Ancestry(ctx, last, observer.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for i := range n {
		want[b.At("orders", int32(i%2), int64(i/2)).String()] = true
		want[ships[i].String()] = true
	}
	got := map[string]bool{}
	for _, nd := range g.Nodes {
		got[nd.ID] = true
		if nd.State != observer.StateRecord {
			t.Errorf("node %s is %s, want a stored record", nd.ID, nd.State)
		}
	}
	if len(got) != len(want) || g.Truncated {
		t.Errorf("ancestry of %s: %d nodes (truncated %v), want %d", last, len(got), g.Truncated, len(want))
	}
	for id := range want {
		if !got[id] {
			t.Errorf("ancestry of %s lacks %s", last, id)
		}
	}
	// The last shipment's direct causes are the newest order on each
	// partition and the previous shipment.
	direct := map[string]bool{}
	for _, e := range g.Edges {
		if e.Effect == last.String() {
			direct[e.Cause] = true
		}
	}
	for _, c := range []headers.Coordinate{b.At("orders", 0, (n-2)/2), b.At("orders", 1, (n-1)/2), ships[n-2]} {
		if !direct[c.String()] {
			t.Errorf("no edge %s -> %s; direct causes %v", c, last, direct)
		}
	}

	// Depth 1: only the direct causes, and the walk says it was cut.
	g1, err := st.Ancestry(ctx, last, observer.Limits{Depth: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(g1.Nodes) != 4 || !g1.Truncated {
		t.Errorf("depth-1 ancestry: %d nodes, truncated %v; want root + 3, truncated", len(g1.Nodes), g1.Truncated)
	}
	g5, err := st.Ancestry(ctx, last, observer.Limits{Nodes: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(g5.Nodes) != 5 || !g5.Truncated {
		t.Errorf("5-node ancestry: %d nodes, truncated %v", len(g5.Nodes), g5.Truncated)
	}
	for _, e := range g5.Edges {
		if !hasNode(g5, e.Cause) || !hasNode(g5, e.Effect) {
			t.Errorf("edge %v leaves the truncated graph", e)
		}
	}

	// Everything descends from the first order.
	first := b.At("orders", 0, 0)
	d, err := st.Descendants(ctx, first, observer.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !hasNode(d, last.String()) || len(d.Nodes) != 2*n {
		t.Errorf("descendants of %s: %d nodes, want %d including %s", first, len(d.Nodes), 2*n, last)
	}

	var tree bytes.Buffer
	if err := g1.WriteTree(&tree); err != nil {
		t.Fatal(err)
	}
	// People read names: the tree and the DOT name topics, not IDs.
	byName := func(c headers.Coordinate) string { return fmt.Sprintf("shipments/%d@%d", c.Partition, c.Offset) }
	if !strings.HasPrefix(tree.String(), byName(last)+"\n  ") || !strings.Contains(tree.String(), "truncated") {
		t.Errorf("tree:\n%s", tree.String())
	}
	var dot bytes.Buffer
	if err := g1.WriteDOT(&dot); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(dot.String(), `"`+byName(ships[n-2])+`" -> "`+byName(last)+`"`) || !strings.Contains(dot.String(), `tooltip="`+last.String()+`"`) {
		t.Errorf("DOT lacks the edge from the previous shipment:\n%s", dot.String())
	}

	if _, err := st.Ancestry(ctx, b.At("orders", 0, 999), observer.Limits{}); !errors.Is(err, observer.ErrNotFound) {
		t.Errorf("ancestry of an unknown record: %v, want ErrNotFound", err)
	}
}

func hasNode(g *observer.Graph, id string) bool {
	for _, n := range g.Nodes {
		if n.ID == id {
			return true
		}
	}
	return false
}

func TestSequenceClaimsResolveToTheSendersRecord(t *testing.T) {
	ctx := ctxFor(t)
	c := broker.New(t)
	b := builder(t, c)
	if err := b.Create(ctx, 1, "up", "down"); err != nil {
		t.Fatal(err)
	}
	up, err := b.Stamped(ctx, "up", 0, &headers.Stamp{Tagged: true, Sender: obsdemo.RetiredSender, Seq: 7})
	if err != nil {
		t.Fatal(err)
	}
	carrier := &headers.Stamp{}
	carrier.Clock.SetSeq(b.Ch("up", 0), obsdemo.RetiredSender, 7)
	carrier.Clock.SetSeq(b.Ch("up", 0), obsdemo.GapSender, 3) // never sent
	down, err := b.Stamped(ctx, "down", 0, carrier)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := scan(t, ctx, c)
	g, err := st.Ancestry(ctx, down, observer.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	var resolved, unresolved bool
	for _, e := range g.Edges {
		if e.Kind != "seq" || e.Effect != down.String() {
			t.Errorf("unexpected edge %v", e)
		}
		if e.Cause == up.String() {
			resolved = true
		}
		if strings.HasPrefix(e.Cause, "seq:") && strings.Contains(e.Cause, obsdemo.GapSender.String()) {
			unresolved = true
		}
	}
	if !resolved || !unresolved {
		t.Errorf("edges %v: want the seq claim resolved to %s and the unseen sender's claim unresolved", g.Edges, up)
	}
	d, err := st.Descendants(ctx, up, observer.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if !hasNode(d, down.String()) {
		t.Errorf("descendants of %s lack %s (sequence claim)", up, down)
	}
}

// TestGraphJSONListsAreNeverNull: a record with no causes or effects
// serialises its lists as [], which the UI and API clients iterate.
func TestGraphJSONListsAreNeverNull(t *testing.T) {
	var b bytes.Buffer
	g := &observer.Graph{Root: "x/0@0", Direction: "both", Nodes: []observer.Node{{ID: "x/0@0", State: observer.StateRecord}}}
	if err := g.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), `"edges": []`) || strings.Contains(b.String(), "null") {
		t.Errorf("graph JSON:\n%s", b.String())
	}
	out, err := json.Marshal(observer.Graph{})
	if err != nil || !strings.Contains(string(out), `"nodes":[]`) || !strings.Contains(string(out), `"edges":[]`) {
		t.Errorf("empty graph JSON: %s %v", out, err)
	}
}
