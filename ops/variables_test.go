package ops

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/parsley-go/parsley/observer"
	"github.com/prometheus/client_golang/prometheus"
)

// observerTopicMetrics returns the observer's metric families that carry
// a topic label, from its collector's descriptions.
func observerTopicMetrics(t *testing.T) map[string]bool {
	t.Helper()
	o, err := observer.New(observer.Config{Brokers: []string{"127.0.0.1:1"}, Topics: []string{"t"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	descs := make(chan *prometheus.Desc, 64)
	o.Collector().Describe(descs)
	close(descs)
	out := map[string]bool{}
	re := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
	for d := range descs {
		if m := re.FindStringSubmatch(d.String()); m != nil && regexp.MustCompile(`\btopic\b`).MatchString(m[2]) {
			out[m[1]] = true
		}
	}
	if len(out) == 0 {
		t.Fatal("no observer metric with a topic label; has the Desc format changed?")
	}
	return out
}

// TestDashboardVariables: the dashboard offers cluster, instance and topic
// variables, and every query honours them: each metric it names is
// filtered by cluster and instance, and each per-topic metric by topic.
func TestDashboardVariables(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []struct {
				Name, Type string
				Definition string // the query of a query variable
			}
		}
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Definition
	}
	for _, name := range []string{"cluster", "instance", "topic"} {
		if q, ok := vars[name]; !ok || !strings.HasPrefix(q, "label_values(") || !strings.HasSuffix(q, ", "+name+")") {
			t.Errorf("variable %s: query %q, want label_values(..., %s)", name, q, name)
		}
	}
	perTopic := observerTopicMetrics(t)
	selector := regexp.MustCompile(`\b(parsley_[a-z0-9_]+)(\{[^}]*\})?`)
	for _, p := range d.Panels {
		for _, q := range p.Targets {
			for _, m := range selector.FindAllStringSubmatch(q.Expr, -1) {
				name, sel := m[1], m[2]
				want := []string{`cluster=~"$cluster"`, `instance=~"$instance"`}
				if perTopic[name] || strings.HasPrefix(name, "parsley_topic_") {
					want = append(want, `topic=~"$topic"`)
				}
				for _, w := range want {
					if !strings.Contains(sel, w) {
						t.Errorf("panel %q: %s lacks %s in %q", p.Title, name, w, q.Expr)
					}
				}
			}
		}
	}
}

// TestAlertsAreDocumented: the rules file points to the alerts section of
// docs/operations.md, and that section names every alert in the file.
func TestAlertsAreDocumented(t *testing.T) {
	rules, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rules), "docs/operations.md#alerts") {
		t.Errorf("%s does not point to docs/operations.md#alerts", rulesFile)
	}
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## Alerts\n")
	if !ok {
		t.Fatal("docs/operations.md has no \"## Alerts\" section")
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\w+)`).FindAllStringSubmatch(string(rules), -1)
	if len(alerts) < 5 {
		t.Fatalf("found %d alerts in %s", len(alerts), rulesFile)
	}
	for _, a := range alerts {
		if !strings.Contains(section, "`"+a[1]+"`") {
			t.Errorf("the alerts section of docs/operations.md does not explain %s", a[1])
		}
	}
}
