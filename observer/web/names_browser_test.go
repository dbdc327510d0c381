package web_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/parsley-go/parsley/internal/rig/obstest"
	"github.com/parsley-go/parsley/observer"
)

// visibleText is the page's rendered text without the elements marked
// as secondary ID detail (class "id"): what a person reads.
const visibleText = `(() => {
  const body = document.body.cloneNode(true);
  body.querySelectorAll('.id, script, title').forEach(e => e.remove());
  document.body.appendChild(body); body.style.display = 'block';
  const t = body.innerText;
  body.remove();
  return t;
})()`

var uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// TestBrowserRecordPagesNameTheirFindings opens, over the demo topology,
// the record page of the first record each finding names, in headless
// Chromium: its "findings for this record" panel names the finding's code
// and links the other records involved. No page of the demo — findings,
// topics, record pages, finding pages — shows a UUID where a name is
// known: topics and the demo's stage senders have names; UUIDs appear
// only as secondary detail (class "id", hover titles). With
// PARSLEY_SCREENSHOTS set it saves the pages it checks there.
func TestBrowserRecordPagesNameTheirFindings(t *testing.T) {
	ctx := obstest.Ctx(t)
	srv, _, _ := demoServer(t, ctx, 4, nil)
	b := newBrowser(t, ctx)
	shots := os.Getenv("PARSLEY_SCREENSHOTS")
	shot := func(name string) {
		if shots == "" {
			return
		}
		png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
		if err != nil {
			t.Fatal(err)
		}
		dir := shots
		if !filepath.IsAbs(dir) {
			dir = filepath.Join("..", "..", dir)
		}
		if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	noUUID := func(page string) {
		t.Helper()
		if m := uuidRE.FindAllString(eval[string](t, b, visibleText), -1); len(m) > 0 {
			t.Errorf("%s shows UUIDs where names are known: %v", page, m)
		}
	}
	b.open(t, srv.URL+"/", `#findings`)
	noUUID("the findings page")
	shot("observer-findings.png")
	b.open(t, srv.URL+"/topics", `#topics`)
	noUUID("the topics page")

	var fs []observer.Finding
	_, body := get(t, srv, "/api/findings")
	if err := jsonUnmarshal(body, &fs); err != nil {
		t.Fatal(err)
	}
	seen := map[observer.Code]bool{}
	for _, f := range fs {
		if seen[f.Code] {
			continue
		}
		seen[f.Code] = true
		page := "/record/" + f.Names[0]
		b.open(t, srv.URL+page, `#record-findings`)
		sel := fmt.Sprintf(`#record-findings li.record-finding[data-code=%q]`, f.Code)
		if n := eval[int](t, b, `document.querySelectorAll('`+sel+`').length`); n != 1 {
			t.Errorf("%s: the findings panel lists %d %s findings, want 1", page, n, f.Code)
			continue
		}
		text := eval[string](t, b, `document.querySelector('`+sel+`').innerText`)
		if !strings.Contains(text, string(f.Code)) {
			t.Errorf("%s: the panel does not name %s: %q", page, f.Code, text)
		}
		// The other records involved are linked, by name.
		for _, other := range f.Names[1:] {
			if !strings.Contains(text, other) {
				t.Errorf("%s: the %s panel does not link %s: %q", page, f.Code, other, text)
			}
		}
		noUUID(page)
		if f.Code == observer.CodeSequenceGap || f.Code == observer.CodeUnsettleableClaim && f.Severity == observer.SeverityError {
			shot("observer-record-" + string(f.Code) + ".png")
		}
		b.open(t, fmt.Sprintf("%s/finding/%d", srv.URL, f.ID), `#history`)
		noUUID(fmt.Sprintf("finding %d", f.ID))
		if f.Code == observer.CodeSequenceGap {
			if n := eval[int](t, b, `document.querySelectorAll('#ack-off').length`); n != 1 {
				t.Error("the finding page of a server without access files does not say acknowledging is off")
			}
			shot("observer-finding.png")
		}
	}
	for _, c := range observer.AllCodes() {
		if !seen[c] {
			t.Errorf("the demo has no %s finding to check", c)
		}
	}
	// A claimed position with no record: its 404 still names the finding.
	var past observer.Finding
	for _, f := range fs {
		if f.Code == observer.CodeUnsettleableClaim && f.Severity == observer.SeverityError {
			past = f
		}
	}
	b.open(t, srv.URL+"/record/"+past.Names[1], `#error`)
	if n := eval[int](t, b, `document.querySelectorAll('#record-findings li[data-code="unsettleable-claim"]').length`); n != 1 {
		t.Errorf("the missing claimed position %s does not list the claim on it", past.Names[1])
	}
	noUUID("the missing position's page")
	shot("observer-missing.png")
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
