package web_test

import (
	"os"
	"os/exec"
	"slices"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/parsley-go/parsley/internal/rig/obstest"
)

// chromium finds Debian's chromium. Without one the test skips, unless CI
// is set, where a missing browser is a broken pipeline.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true but no chromium binary on PATH: install it with `apt-get install -y chromium`")
	}
	t.Skip("no chromium binary on PATH (apt-get install -y chromium); skipping the browser test")
	return ""
}

// TestBrowserDrawsTheGraph loads the UI on a demo dataset in headless
// Chromium, goes from the findings page to a record page, and checks the
// SVG that dagre laid out has exactly the expected nodes and edges.
func TestBrowserDrawsTheGraph(t *testing.T) {
	ctx := obstest.Ctx(t)
	const n = 6
	srv, ships, b := demoServer(t, ctx, n, nil)

	bctx := newBrowser(t, ctx).ctx

	// The findings page lists the faulty topology's findings.
	root := ships[2].String()
	if err := chromedp.Do(bctx, chromedp.Navigate(srv.URL+"/"), chromedp.WaitReady(chromedp.CSS(`#findings`))); err != nil {
		t.Fatal(err)
	}
	rows, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('#findings tr.finding').length`))
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(bctx,
		chromedp.Navigate(srv.URL+"/record/shipments/0@2"),
		chromedp.WaitReady(chromedp.CSS(`#graph[data-drawn="true"] svg`)),
	); err != nil {
		t.Fatal(err)
	}
	if rows != 10 {
		t.Errorf("findings page shows %d findings, want 10", rows)
	}
	nodes, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`Array.from(document.querySelectorAll('#graph svg g.node')).map(g => g.dataset.id)`))
	if err != nil {
		t.Fatal(err)
	}
	edges, err := chromedp.Run(bctx, chromedp.Evaluate[[][2]string](`Array.from(document.querySelectorAll('#graph svg path.edge')).map(p => [p.dataset.cause, p.dataset.effect])`))
	if err != nil {
		t.Fatal(err)
	}
	dataEdges, err := chromedp.Run(bctx, chromedp.Evaluate[int](`JSON.parse(document.getElementById('graph-data').textContent).edges.length`))
	if err != nil {
		t.Fatal(err)
	}
	// shipments@2 descends from orders 0..2 and shipments 0..1, and
	// shipments 3..5 descend from it.
	var want []string
	for i := range 3 {
		want = append(want, b.At("orders", int32(i%2), int64(i/2)).String())
	}
	for i := range n {
		want = append(want, ships[i].String())
	}
	slices.Sort(want)
	slices.Sort(nodes)
	if !slices.Equal(nodes, want) {
		t.Errorf("drawn nodes:\n %v\nwant\n %v", nodes, want)
	}
	if len(edges) == 0 || len(edges) != dataEdges {
		t.Errorf("drew %d edges, the page's graph has %d", len(edges), dataEdges)
	}
	for _, e := range [][2]string{
		{b.At("orders", 0, 1).String(), root}, // order 2 → shipment 2
		{b.At("orders", 1, 0).String(), root}, // order 1 → shipment 2
		{ships[1].String(), root},
		{root, ships[3].String()},
		{ships[4].String(), ships[5].String()},
	} {
		if !slices.Contains(edges, e) {
			t.Errorf("no drawn edge %s -> %s", e[0], e[1])
		}
	}
	for _, e := range edges {
		if !slices.Contains(nodes, e[0]) || !slices.Contains(nodes, e[1]) {
			t.Errorf("edge %v has an endpoint that is not drawn", e)
		}
	}

	// Nodes link to their own record pages.
	if err := chromedp.Do(bctx,
		chromedp.Click(chromedp.CSS(`#graph svg g.node[data-id="`+ships[5].String()+`"] a`)),
		chromedp.WaitReady(chromedp.CSS(`h1[data-coord="`+ships[5].String()+`"]`)),
		chromedp.WaitReady(chromedp.CSS(`#graph[data-drawn="true"] svg`)),
	); err != nil {
		t.Fatal(err)
	}
	title, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS(`h1`)))
	if err != nil {
		t.Fatal(err)
	}
	if title != "Record shipments/0@5" {
		t.Errorf("after clicking the node of %s the page is %q", ships[5], title)
	}
}
