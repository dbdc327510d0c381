package web_test

import (
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/obstest"
	"github.com/parsley-go/parsley/observer"
	"github.com/parsley-go/parsley/observer/web"
)

// summaryRow returns the home page's summary row for code.
func summaryRow(t *testing.T, page string, code observer.Code) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<tr class="code-row[^"]*" data-code="` + string(code) + `">(.*?)</tr>`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no summary row for %s in the findings page", code)
	}
	return m[1]
}

// TestSummaryCountsBySeverity: the home page's summary counts each code's
// findings by their own severities, as the detail list and /metrics do,
// and a code without findings carries no severity label. The demo's
// unsettleable claims are one error (past the log end) and two infos (a
// marker, an aborted record); it once read "error | 3".
func TestSummaryCountsBySeverity(t *testing.T) {
	ctx := obstest.Ctx(t)
	c := broker.New(t)
	b := obstest.Builder(t, c)
	if _, err := b.Faulty(ctx); err != nil {
		t.Fatal(err)
	}
	_, o := obstest.Scan(t, ctx, c, observer.Config{})
	srv := httptest.NewServer(obstest.Server(t, o))
	defer srv.Close()
	code, page := get(t, srv, "/")
	if code != 200 {
		t.Fatalf("GET /: %d", code)
	}
	row := summaryRow(t, page, observer.CodeUnsettleableClaim)
	if !strings.Contains(row, `<span class="sev-error">1 error</span>`) || !strings.Contains(row, `<span class="sev-info">2 info</span>`) {
		t.Errorf("unsettleable-claim summary row does not count 1 error and 2 info:\n%s", row)
	}
	if strings.Contains(row, "3 error") {
		t.Errorf("unsettleable-claim summary row counts its infos as errors:\n%s", row)
	}
	// Every code of the demo has findings; a clean store has none, and no
	// row may then say "error".
	st, err := observer.OpenStore(ctx, filepath.Join(t.TempDir(), "empty.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	h, err := web.New(web.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	empty := httptest.NewServer(h)
	defer empty.Close()
	_, clean := get(t, empty, "/")
	for _, c := range observer.AllCodes() {
		if row := summaryRow(t, clean, c); strings.Contains(row, "sev-") {
			t.Errorf("%s has no findings but its row shows a severity:\n%s", c, row)
		}
	}
	// The page's error total is /metrics' error gauge.
	_, metrics := get(t, srv, "/metrics")
	m := regexp.MustCompile(`parsley_observer_findings_by_severity\{severity="error"\} (\d+)`).FindStringSubmatch(metrics)
	if m == nil {
		t.Fatalf("no error gauge in /metrics:\n%s", metrics)
	}
	n := 0
	for _, c := range observer.AllCodes() {
		if e := regexp.MustCompile(`<span class="sev-error">(\d+) error</span>`).FindStringSubmatch(summaryRow(t, page, c)); e != nil {
			k, _ := strconv.Atoi(e[1])
			n += k
		}
	}
	if want, _ := strconv.Atoi(m[1]); n != want || n != 4 {
		t.Errorf("summary rows count %d errors, /metrics %d; the demo has 4 (gap, regression, claim past the end, undecodable)", n, want)
	}
}
