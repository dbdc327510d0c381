package ops

import (
	"bufio"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/parsley-go/parsley/observer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
)

const (
	rulesFile     = "prometheus/parsley-alerts.yml"
	dashboardFile = "grafana/parsley-dashboard.json"
)

// exported returns every metric name the code exports, mapped to whether
// it is a histogram: the observer's, from its collector, and the
// stages', from the metric constants in stage/metrics.go.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	// An observer alone, and one shard of a group, which exports more.
	for _, cfg := range []observer.Config{{}, {Group: "g", Instance: "a"}} {
		cfg.Brokers, cfg.Topics = []string{"127.0.0.1:1"}, []string{"t"}
		o, err := observer.New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		descs := make(chan *prometheus.Desc, 64)
		o.Collector().Describe(descs)
		close(descs)
		o.Close()
		fq := regexp.MustCompile(`fqName: "([^"]+)"`)
		for d := range descs {
			m := fq.FindStringSubmatch(d.String())
			if m == nil {
				t.Fatalf("no name in %s", d)
			}
			names[m[1]] = false
		}
	}
	if _, ok := names["parsley_observer_partitions"]; !ok {
		t.Fatal("a shard exports no parsley_observer_partitions")
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../stage/metrics.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok || len(vs.Names) != 1 || len(vs.Values) != 1 || !strings.HasPrefix(vs.Names[0].Name, "metric") {
			return true
		}
		if lit, ok := vs.Values[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
			v, _ := strconv.Unquote(lit.Value)
			consts[vs.Names[0].Name] = v
		}
		return true
	})
	src, err := os.ReadFile("../stage/metrics.go")
	if err != nil {
		t.Fatal(err)
	}
	hist := regexp.MustCompile(`HistogramOpts\{\s*Name:\s*(metric\w+)`).FindAllSubmatch(src, -1)
	for name, v := range consts {
		names[v] = slices.ContainsFunc(hist, func(m [][]byte) bool { return string(m[1]) == name })
	}
	if len(consts) < 10 {
		t.Fatalf("found %d stage metric constants in stage/metrics.go; has the file changed shape?", len(consts))
	}
	return names
}

var metricRef = regexp.MustCompile(`\bparsley_[a-z0-9_]+`)

// unknown returns the parsley_ metrics expr names that the code does not
// export; a histogram is named by its _bucket, _sum or _count series.
func unknown(expr string, names map[string]bool) []string {
	var out []string
	for _, m := range metricRef.FindAllString(expr, -1) {
		if _, ok := names[m]; ok {
			continue
		}
		base, found := "", false
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(m, suf); ok {
				base, found = b, true
			}
		}
		if found && names[base] {
			continue
		}
		out = append(out, m)
	}
	return out
}

// rule is what the test reads of one alerting rule.
type rule struct {
	alert, expr, forText, severity, summary, description string
}

// readRules reads the alert rules file. The file keeps to a plain shape —
// one key per line, expressions on one line — so it is read line by line
// here; promtool, when installed, checks it as Prometheus would.
func readRules(t *testing.T) []rule {
	t.Helper()
	f, err := os.Open(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rules []rule
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if v, ok := strings.CutPrefix(line, "- alert: "); ok {
			rules = append(rules, rule{alert: v})
			continue
		}
		if len(rules) == 0 {
			continue
		}
		r := &rules[len(rules)-1]
		key, v, ok := strings.Cut(line, ": ")
		if !ok {
			continue
		}
		switch key {
		case "expr":
			r.expr = v
		case "for":
			r.forText = v
		case "severity":
			r.severity = v
		case "summary":
			r.summary = v
		case "description":
			r.description = v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return rules
}

// TestAlertRules: every rule is complete, its duration parses as
// Prometheus parses it, and every metric it names exists; promtool, when
// on PATH, accepts the file.
func TestAlertRules(t *testing.T) {
	names := exported(t)
	rules := readRules(t)
	if len(rules) < 8 {
		t.Fatalf("read %d rules from %s; want the observer's and the stages'", len(rules), rulesFile)
	}
	seen := map[string]bool{}
	covers := map[string]bool{}
	for _, r := range rules {
		if seen[r.alert] || !model.LabelValue(r.alert).IsValid() {
			t.Errorf("alert %q: duplicate or invalid name", r.alert)
		}
		seen[r.alert] = true
		if r.expr == "" || r.summary == "" {
			t.Errorf("alert %s lacks an expr or a summary", r.alert)
		}
		if _, err := model.ParseDuration(r.forText); err != nil {
			t.Errorf("alert %s: for %q: %v", r.alert, r.forText, err)
		}
		if !slices.Contains([]string{"critical", "warning", "info"}, r.severity) {
			t.Errorf("alert %s: severity %q", r.alert, r.severity)
		}
		if bad := unknown(r.expr, names); len(bad) > 0 {
			t.Errorf("alert %s names metrics no code exports: %v", r.alert, bad)
		}
		for _, m := range metricRef.FindAllString(r.expr, -1) {
			covers[strings.SplitN(m, "_", 3)[1]] = true
		}
	}
	if !covers["observer"] || !covers["records"] {
		t.Errorf("the rules cover %v; want the observer's metrics and the stages'", covers)
	}
	if p, err := exec.LookPath("promtool"); err == nil {
		if out, err := exec.Command(p, "check", "rules", rulesFile).CombinedOutput(); err != nil {
			t.Errorf("promtool check rules: %v\n%s", err, out)
		}
	} else {
		t.Log("promtool not on PATH (apt-get install prometheus); checked the rules' shape and metrics only")
	}
}

// TestUnknownMetricIsCaught: the check above fails on a metric that does
// not exist.
func TestUnknownMetricIsCaught(t *testing.T) {
	names := exported(t)
	if bad := unknown(`rate(parsley_records_delivred_total[5m]) > 0 and parsley_step_duration_seconds_bucket`, names); !slices.Equal(bad, []string{"parsley_records_delivred_total"}) {
		t.Errorf("unknown = %v, want the misspelt counter only", bad)
	}
	if bad := unknown(`parsley_observer_up_bucket`, names); len(bad) != 1 {
		t.Errorf("a _bucket series of a gauge passed: %v", bad)
	}
}

// TestDashboard: the dashboard is Grafana JSON whose panels have unique
// IDs, fit the 24-column grid, query the datasource variable, and name
// only metrics that exist.
func TestDashboard(t *testing.T) {
	names := exported(t)
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Title      string
		UID        string
		Templating struct{ List []struct{ Name, Type string } }
		Panels     []struct {
			ID      int
			Type    string
			Title   string
			GridPos struct{ H, W, X, Y int }
			Targets []struct{ Expr, RefID string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.Title == "" || d.UID == "" || len(d.Templating.List) == 0 || d.Templating.List[0].Type != "datasource" {
		t.Errorf("dashboard needs a title, a uid and a datasource variable")
	}
	ids := map[int]bool{}
	queries := 0
	for _, p := range d.Panels {
		if ids[p.ID] {
			t.Errorf("panel %q: duplicate id %d", p.Title, p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.W < 1 || p.GridPos.X+p.GridPos.W > 24 || p.GridPos.H < 1 {
			t.Errorf("panel %q: gridPos %+v outside the 24-column grid", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			queries++
			if bad := unknown(q.Expr, names); len(bad) > 0 || q.Expr == "" {
				t.Errorf("panel %q queries metrics no code exports: %v (%q)", p.Title, bad, q.Expr)
			}
		}
	}
	if queries < 10 {
		t.Errorf("%d queries; want the observer's and the stages' panels", queries)
	}
}
