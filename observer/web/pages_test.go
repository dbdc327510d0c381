package web_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/obsdemo"
	"github.com/parsley-go/parsley/internal/rig/obstest"
	"github.com/parsley-go/parsley/observer"
)

// browser is a headless Chromium tab at a laptop's window size that
// records every JavaScript exception and console error.
type browser struct {
	ctx  context.Context
	mu   sync.Mutex
	errs []string
}

func newBrowser(t *testing.T, ctx context.Context) *browser {
	t.Helper()
	exe := chromium(t)
	actx, cancel := chromedp.NewExecAllocator(ctx,
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 800))
	t.Cleanup(cancel)
	bctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(cancel)
	b := &browser{ctx: bctx}
	if err := chromedp.Listen(bctx, func(ev any) {
		var msg string
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg = ev.ExceptionDetails.Text
			if ev.ExceptionDetails.Exception != nil {
				msg += " " + ev.ExceptionDetails.Exception.Description
			}
		case *runtime.EventConsoleAPICalled:
			if ev.Type != runtime.ConsoleAPICalledTypeError {
				return
			}
			msg = "console.error"
			for _, a := range ev.Args {
				msg += " " + string(a.Value) + a.Description
			}
		default:
			return
		}
		b.mu.Lock()
		b.errs = append(b.errs, msg)
		b.mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	return b
}

// open loads url, waits for sel and fails the test on any JavaScript
// error the page raised.
func (b *browser) open(t *testing.T, url, sel string) {
	t.Helper()
	b.mu.Lock()
	b.errs = nil
	b.mu.Unlock()
	if err := chromedp.Do(b.ctx, chromedp.Navigate(url), chromedp.WaitReady(chromedp.CSS(sel))); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	// Let late scripts run before judging the console.
	if _, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](`new Promise(r => requestAnimationFrame(() => r(true)))`, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.errs {
		t.Errorf("%s: JavaScript error: %s", url, e)
	}
}

func eval[T any](t *testing.T, b *browser, js string) T {
	t.Helper()
	v, err := chromedp.Run(b.ctx, chromedp.Evaluate[T](js))
	if err != nil {
		t.Fatalf("evaluate %s: %v", js, err)
	}
	return v
}

// outsideSVG lists the drawn nodes and edges whose boxes leave the SVG's
// viewport, and says whether the root record is outside the window.
const outsideSVG = `(() => {
  const svg = document.querySelector('#graph svg').getBoundingClientRect();
  const out = [];
  document.querySelectorAll('#graph svg g.node, #graph svg path.edge').forEach(e => {
    const r = e.getBoundingClientRect();
    if (r.left < svg.left - 1 || r.top < svg.top - 1 || r.right > svg.right + 1 || r.bottom > svg.bottom + 1)
      out.push(e.dataset.id || (e.dataset.cause + ' -> ' + e.dataset.effect));
  });
  const root = document.querySelector('#graph svg g.node.root').getBoundingClientRect();
  if (root.top < 0 || root.left < 0 || root.bottom > window.innerHeight || root.right > window.innerWidth || root.width < 1)
    out.push('root outside the window');
  return out;
})()`

// shapes builds a deep graph (a chain of 40 records, each claiming the
// one before) and a wide one (a record claiming one record on each of 30
// partitions), and a lone unstamped record with nothing to draw but
// itself. It returns their coordinates.
func shapes(t *testing.T, ctx context.Context, b *obsdemo.Builder) (deep, wide, lone headers.Coordinate) {
	t.Helper()
	if err := b.Create(ctx, 1, "deep", "sink", "lone"); err != nil {
		t.Fatal(err)
	}
	if err := b.Create(ctx, 30, "fan"); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		st := &headers.Stamp{}
		if i > 0 {
			st.Clock.SetOffset(deep.Channel, deep.Offset)
		}
		c, err := b.Stamped(ctx, "deep", 0, st)
		if err != nil {
			t.Fatal(err)
		}
		deep = c
	}
	sinkStamp := &headers.Stamp{}
	for p := range int32(30) {
		c, err := b.Stamped(ctx, "fan", p, &headers.Stamp{})
		if err != nil {
			t.Fatal(err)
		}
		sinkStamp.Clock.SetOffset(c.Channel, c.Offset)
	}
	wide, err := b.Stamped(ctx, "sink", 0, sinkStamp)
	if err != nil {
		t.Fatal(err)
	}
	if lone, err = b.Produce(ctx, "lone", 0, nil); err != nil {
		t.Fatal(err)
	}
	return deep, wide, lone
}

// demoServer serves, after one observer pass, the demo topology — a clean
// pipeline of n shipments and one instance of every finding — plus what
// more adds; it returns the server, the shipments and the builder.
func demoServer(t *testing.T, ctx context.Context, n int, more func(*obsdemo.Builder)) (*httptest.Server, []headers.Coordinate, *obsdemo.Builder) {
	t.Helper()
	c := broker.New(t)
	bld := obstest.Builder(t, c)
	ships, err := bld.Clean(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bld.Faulty(ctx); err != nil {
		t.Fatal(err)
	}
	if more != nil {
		more(bld)
	}
	_, o := obstest.Scan(t, ctx, c, observer.Config{})
	srv := httptest.NewServer(obstest.Server(t, o))
	t.Cleanup(srv.Close)
	return srv, ships, bld
}

// TestBrowserPages loads every page in headless Chromium at 1280×800: no
// JavaScript error on any; on record pages every node and edge lies inside
// the SVG's viewport for a deep and a wide graph, the record itself is
// visible without scrolling, and a record with no edges still draws.
func TestBrowserPages(t *testing.T) {
	ctx := obstest.Ctx(t)
	var deep, wide, lone headers.Coordinate
	srv, _, _ := demoServer(t, ctx, 6, func(bld *obsdemo.Builder) { deep, wide, lone = shapes(t, ctx, bld) })
	b := newBrowser(t, ctx)

	b.open(t, srv.URL+"/", `#codes`)
	if n := eval[int](t, b, `document.querySelectorAll('#banner').length`); n != 0 {
		t.Error("the findings page shows the cannot-read banner while the observer reads the cluster")
	}
	if n := eval[int](t, b, `document.querySelectorAll('#codes tr.code-row').length`); n != len(observer.AllCodes()) {
		t.Errorf("findings page counts %d codes, want %d", n, len(observer.AllCodes()))
	}
	if txt := eval[string](t, b, `document.querySelector('#findings a.coord').textContent`); strings.Contains(txt, "-0000-") || !strings.Contains(txt, "/") {
		t.Errorf("findings page links a record as %q; want it by name", txt)
	}
	b.open(t, srv.URL+"/?q=gap/0@2", `#findings`)
	if n := eval[int](t, b, `document.querySelectorAll('#findings tr.finding').length`); n != 1 {
		t.Errorf("search for gap/0@2 shows %d findings, want 1", n)
	}
	b.open(t, srv.URL+"/topics", `#topics`)
	if cov := eval[string](t, b, `document.querySelector('tr[data-topic="mixed"] td.coverage').textContent.trim()`); !strings.HasSuffix(cov, "%") || cov == "100.0%" || cov == "0.0%" {
		t.Errorf("topics page shows the partly stamped topic's coverage as %q", cov)
	}
	b.open(t, srv.URL+"/record/nosuch/0@0", `#error`)
	if n := eval[int](t, b, `document.querySelectorAll('header a[href="/topics"]').length`); n != 1 {
		t.Error("error page lost the navigation")
	}

	for _, tc := range []struct {
		name  string
		at    headers.Coordinate
		nodes int
	}{{"deep", deep, 40}, {"wide", wide, 31}, {"lone", lone, 1}} {
		t.Run(tc.name, func(t *testing.T) {
			b.open(t, srv.URL+"/record/"+tc.at.String()+"?depth=100", `#graph[data-drawn="true"] svg`)
			if n := eval[int](t, b, `document.querySelectorAll('#graph svg g.node').length`); n != tc.nodes {
				t.Errorf("drew %d nodes, want %d", n, tc.nodes)
			}
			if out := eval[[]string](t, b, outsideSVG); len(out) > 0 {
				t.Errorf("outside the drawing or the window: %v", out)
			}
		})
	}
}

// TestScreenshots regenerates the screenshots docs/observer.md shows. It
// runs only when PARSLEY_SCREENSHOTS names the directory to write to:
//
//	PARSLEY_SCREENSHOTS=docs/images go test ./observer/web -run TestScreenshots -count=1
func TestScreenshots(t *testing.T) {
	dir := os.Getenv("PARSLEY_SCREENSHOTS")
	if dir == "" {
		t.Skip("set PARSLEY_SCREENSHOTS=docs/images to regenerate the documentation's screenshots")
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join("..", "..", dir) // relative to the module root
	}
	ctx := obstest.Ctx(t)
	srv, ships, _ := demoServer(t, ctx, 6, nil)
	b := newBrowser(t, ctx)
	for _, p := range []struct{ file, path, sel string }{
		{"observer-findings.png", "/", "#codes"},
		{"observer-topics.png", "/topics", "#topics"},
		{"observer-record.png", "/record/" + ships[2].String(), `#graph[data-drawn="true"] svg`},
		{"observer-error.png", "/record/nosuch/0@0", "#error"},
		{"observer-finding.png", "/finding/1", "#history"},
		{"observer-record-gap.png", "/record/gap/0@2", `#graph[data-drawn="true"] svg`},
	} {
		b.open(t, srv.URL+p.path, p.sel)
		png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p.file), png, 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Println("wrote", filepath.Join(dir, p.file))
	}
}

// TestBrowserCentresTheRecord: on a deep graph, whose fitted view is
// whole but small, "Centre on record" shows the record at full size in
// the middle of the drawing.
func TestBrowserCentresTheRecord(t *testing.T) {
	ctx := obstest.Ctx(t)
	c := broker.New(t)
	bld := obstest.Builder(t, c)
	deep, _, _ := shapes(t, ctx, bld)
	_, o := obstest.Scan(t, ctx, c, observer.Config{})
	srv := httptest.NewServer(obstest.Server(t, o))
	defer srv.Close()
	b := newBrowser(t, ctx)
	b.open(t, srv.URL+"/record/"+deep.String()+"?depth=100", `#graph[data-drawn="true"] svg`)
	width := `document.querySelector('#graph svg g.node.root').getBoundingClientRect().width`
	fitted := eval[float64](t, b, width)
	if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS(`#graph-controls [data-act=centre]`))); err != nil {
		t.Fatal(err)
	}
	full := eval[float64](t, b, width)
	if full < 100 || full < 2*fitted {
		t.Errorf("the record is %.0fpx wide after centring (%.0fpx fitted); want its full width", full, fitted)
	}
	off := eval[float64](t, b, `(() => { const s = document.querySelector('#graph svg').getBoundingClientRect(), r = document.querySelector('#graph svg g.node.root').getBoundingClientRect();
		return Math.abs((r.left + r.right) / 2 - (s.left + s.right) / 2) + Math.abs((r.top + r.bottom) / 2 - (s.top + s.bottom) / 2); })()`)
	if off > 4 {
		t.Errorf("after centring the record is %.0fpx from the drawing's centre", off)
	}
}
