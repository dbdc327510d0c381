package ops

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/obstest"
	"github.com/parsley-go/parsley/observer"
)

// scrape returns the samples of a /metrics page, "name{labels}" → value.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

// simpleRule is the one form of expression the Go evaluation below
// understands: NAME{LABEL="VALUE"} > NUMBER.
var simpleRule = regexp.MustCompile(`^([a-z_]+)\{([a-z_]+)="([^"]*)"\} > ([0-9.]+)$`)

// firesInGo evaluates a simple-form expression over one scrape: whether
// any sample matches and exceeds the bound (held for the rule's "for",
// since the scrape is constant).
func firesInGo(t *testing.T, expr string, samples map[string]float64) bool {
	t.Helper()
	m := simpleRule.FindStringSubmatch(expr)
	if m == nil {
		t.Fatalf("expression %q is not of the form NAME{LABEL=\"VALUE\"} > N that the Go evaluation understands", expr)
	}
	bound, _ := strconv.ParseFloat(m[4], 64)
	label := regexp.MustCompile(`(^|[{,])` + regexp.QuoteMeta(m[2]) + `="` + regexp.QuoteMeta(m[3]) + `"`)
	for series, v := range samples {
		name, labels, _ := strings.Cut(series, "{")
		if name == m[1] && label.MatchString("{"+labels) && v > bound {
			return true
		}
	}
	return false
}

// firesInPromtool runs promtool's rule tests with the scrape as constant
// input series and reports whether alert fires after its "for".
func firesInPromtool(t *testing.T, promtool, alert string, samples map[string]float64) bool {
	t.Helper()
	rules, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var series strings.Builder
	for s, v := range samples {
		fmt.Fprintf(&series, "      - series: '%s'\n        values: '%gx60'\n", s, v)
	}
	// Expect no alert: promtool then fails exactly when it fires, and says
	// so with the alert it got.
	test := fmt.Sprintf("rule_files: [%q]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n%s    alert_rule_test:\n      - eval_time: 45m\n        alertname: %s\n        exp_alerts: []\n",
		rules, series.String(), alert)
	path := filepath.Join(t.TempDir(), "alerts_test.yml")
	if err := os.WriteFile(path, []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "test", "rules", path).CombinedOutput()
	if err == nil {
		return false
	}
	if !strings.Contains(string(out), alert) || !strings.Contains(string(out), "got:") {
		t.Fatalf("promtool test rules failed for another reason: %v\n%s", err, out)
	}
	return true
}

// TestAcknowledgedFindingStopsItsAlert runs the alert rules on stamp
// findings against the observer's real /metrics: with the demo's open
// error and warning findings they fire; once every error finding is
// acknowledged the error alert no longer does, while the warnings still
// page. It evaluates with promtool when installed (apt-get install
// prometheus), and otherwise evaluates the rules' simple form in Go.
func TestAcknowledgedFindingStopsItsAlert(t *testing.T) {
	ctx := obstest.Ctx(t)
	c := broker.New(t)
	b := obstest.Builder(t, c)
	if _, err := b.Faulty(ctx); err != nil {
		t.Fatal(err)
	}
	st, o := obstest.Scan(t, ctx, c, observer.Config{})
	srv := httptest.NewServer(obstest.Server(t, o))
	defer srv.Close()

	rules := map[string]string{}
	for _, r := range readRules(t) {
		rules[r.alert] = r.expr
	}
	fires := func(alert string, samples map[string]float64) bool {
		return firesInGo(t, rules[alert], samples)
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		t.Logf("evaluating the rules with %s", p)
		fires = func(alert string, samples map[string]float64) bool { return firesInPromtool(t, p, alert, samples) }
	} else {
		t.Log("promtool not on PATH (apt-get install prometheus); evaluating the rules' simple form in Go")
	}
	// /findings evaluates (and records) them; /metrics then shows the counts.
	if code, _ := getStatus(t, srv.URL+"/api/findings"); code != 200 {
		t.Fatalf("/api/findings: %d", code)
	}
	before := scrape(t, srv.URL+"/metrics")
	if !fires("ParsleyStampErrors", before) || !fires("ParsleyStampWarnings", before) {
		t.Fatalf("with open error and warning findings the alerts do not fire; metrics %v", before)
	}
	fs, err := o.Findings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fs {
		if f.Severity == observer.SeverityError {
			if _, err := st.Acknowledge(context.Background(), f.ID, "oncall", "known, being fixed"); err != nil {
				t.Fatal(err)
			}
			n++
		}
	}
	if n != 4 {
		t.Fatalf("acknowledged %d error findings, the demo has 4", n)
	}
	// The observer's next evaluation publishes the counts.
	if _, err := o.Findings(ctx); err != nil {
		t.Fatal(err)
	}
	after := scrape(t, srv.URL+"/metrics")
	if fires("ParsleyStampErrors", after) {
		t.Errorf("every error finding is acknowledged, yet ParsleyStampErrors fires; metrics %v", after)
	}
	if !fires("ParsleyStampWarnings", after) {
		t.Errorf("the warnings are still open, yet ParsleyStampWarnings does not fire")
	}
}

func getStatus(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
