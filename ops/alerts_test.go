package ops

import (
	"context"
	"fmt"
	"io"
	"maps"
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
// understands: NAME{LABEL="VALUE"} > NUMBER, or that series summed by some
// labels, over its maximum in a range:
// sum by (L, ...) (max_over_time(NAME{LABEL="VALUE"}[D])) > NUMBER.
var simpleRule = regexp.MustCompile(`^(?:sum by \(([a-z_, ]+)\) \(max_over_time\()?([a-z_]+)\{([a-z_]+)="([^"]*)"\}(?:\[[0-9a-z]+\]\)\))? > ([0-9.]+)$`)

// valuesInGo evaluates a simple-form expression over one scrape, whose
// samples are constant over time: the value of each group of matching
// samples that exceeds the bound (held for the rule's "for"), by the
// group's labels.
func valuesInGo(t *testing.T, expr string, samples map[string]float64) map[string]float64 {
	t.Helper()
	m := simpleRule.FindStringSubmatch(expr)
	if m == nil {
		t.Fatalf("expression %q is not of a form the Go evaluation understands (see simpleRule)", expr)
	}
	by, name, lname, lvalue := m[1], m[2], m[3], m[4]
	bound, _ := strconv.ParseFloat(m[5], 64)
	label := regexp.MustCompile(`(^|[{,])` + regexp.QuoteMeta(lname) + `="` + regexp.QuoteMeta(lvalue) + `"`)
	groups := map[string]float64{}
	for series, v := range samples {
		n, labels, _ := strings.Cut(series, "{")
		if n != name || !label.MatchString("{"+labels) {
			continue
		}
		key := series // no sum: each series on its own
		if by != "" {
			var parts []string
			for _, l := range strings.Split(by, ",") {
				l = strings.TrimSpace(l)
				if lm := regexp.MustCompile(`(?:^|[{,])` + l + `="([^"]*)"`).FindStringSubmatch("{" + labels); lm != nil {
					parts = append(parts, l+"="+lm[1])
				}
			}
			key = strings.Join(parts, ",")
		}
		groups[key] += v
	}
	for k, v := range groups {
		if !(v > bound) {
			delete(groups, k)
		}
	}
	return groups
}

// firesInGo reports whether a simple-form expression fires over one scrape.
func firesInGo(t *testing.T, expr string, samples map[string]float64) bool {
	return len(valuesInGo(t, expr, samples)) > 0
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

// TestStampAlertsSumTheShards: the stamp alerts add up the findings the
// shards of a group count (each counts those it records): two shards of one
// job with 2 and 3 open error findings page once, for 5; two observers of
// different jobs page apart. Evaluated with promtool when installed, else
// in Go.
func TestStampAlertsSumTheShards(t *testing.T) {
	rules := map[string]rule{}
	for _, r := range readRules(t) {
		rules[r.alert] = r
	}
	samples := map[string]float64{
		`parsley_observer_findings_by_severity{instance="shard-a:8080",job="parsley-observe",severity="error",shard="a"}`: 2,
		`parsley_observer_findings_by_severity{instance="shard-b:8080",job="parsley-observe",severity="error",shard="b"}`: 3,
		`parsley_observer_findings_by_severity{instance="other:8080",job="observe-staging",severity="error"}`:             1,
	}
	want := map[string]float64{"job=parsley-observe": 5, "job=observe-staging": 1}
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("promtool not on PATH (apt-get install prometheus); evaluating the rule's simple form in Go")
		if got := valuesInGo(t, rules["ParsleyStampErrors"].expr, samples); !maps.Equal(got, want) {
			t.Errorf("ParsleyStampErrors over two shards and another job: %v, want %v", got, want)
		}
		return
	}
	r := rules["ParsleyStampErrors"]
	var series, alerts strings.Builder
	for s, v := range samples {
		fmt.Fprintf(&series, "      - series: '%s'\n        values: '%gx60'\n", s, v)
	}
	for job, n := range map[string]int{"parsley-observe": 5, "observe-staging": 1} {
		fmt.Fprintf(&alerts, "          - exp_labels: {severity: %s, job: %s}\n            exp_annotations: {summary: %q, description: %q}\n",
			r.severity, job, strings.ReplaceAll(strings.Trim(r.summary, `"`), "{{ $value }}", strconv.Itoa(n)), strings.Trim(r.description, `"`))
	}
	rulesPath, err := filepath.Abs(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	test := fmt.Sprintf("rule_files: [%q]\nevaluation_interval: 1m\ntests:\n  - interval: 1m\n    input_series:\n%s    alert_rule_test:\n      - eval_time: 45m\n        alertname: ParsleyStampErrors\n        exp_alerts:\n%s",
		rulesPath, series.String(), alerts.String())
	path := filepath.Join(t.TempDir(), "sum_test.yml")
	if err := os.WriteFile(path, []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(p, "test", "rules", path).CombinedOutput(); err != nil {
		t.Errorf("promtool: ParsleyStampErrors over two shards and another job does not page once per job with the sum:\n%s", out)
	}
}
