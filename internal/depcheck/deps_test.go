package depcheck

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/parsley-go/parsley"

// layers names each light package and the import-path prefixes its
// non-standard dependencies may have. A package whose folder does not exist
// yet is skipped, so the rule is in force from the commit that adds it.
var layers = []struct {
	pkg     string
	allowed []string
}{
	{"headers", []string{module + "/headers"}},
	{"protocol", []string{module + "/headers", module + "/protocol"}},
	// internal/kclient holds the franz-go client defaults clock shares with
	// stage and the bridge; being this module's, its own imports are walked
	// and held to clock's rule too.
	{"clock", []string{module + "/headers", module + "/clock", module + "/internal/kclient", "github.com/twmb/franz-go/"}},
}

func TestLightLayersImportOnlyWhatTheyMay(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, l := range layers {
		if _, err := os.Stat(filepath.Join(root, l.pkg)); err != nil {
			continue
		}
		checked++
		cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}:{{join .Imports \" \"}}{{end}}", "./"+l.pkg+"/...")
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", l.pkg, err)
		}
		for _, v := range violations(string(out), l.allowed) {
			t.Errorf("%s imports %s; it may import only the standard library and %v", l.pkg, v, l.allowed)
		}
	}
	if checked == 0 {
		t.Fatal("no layer found to check; is the test running from internal/depcheck?")
	}
}

// violations walks the non-standard import graph printed by go list (one
// "pkg:imp imp ..." line per package) from this module's packages. A
// package outside the allowed prefixes imported by a module package is a
// violation; an allowed third-party package (franz-go) brings its own
// dependencies, which are not this module's choice and are not walked.
func violations(graph string, prefixes []string) []string {
	imports := make(map[string][]string)
	for _, line := range strings.Split(strings.TrimSpace(graph), "\n") {
		pkg, imps, ok := strings.Cut(line, ":")
		if !ok || pkg == "" {
			continue
		}
		imports[pkg] = strings.Fields(imps)
	}
	var bad []string
	for pkg, imps := range imports {
		if !strings.HasPrefix(pkg, module+"/") && pkg != module {
			continue
		}
		for _, imp := range imps {
			if _, nonStd := imports[imp]; nonStd && !allowed(imp, prefixes) {
				bad = append(bad, imp+" (from "+pkg+")")
			}
		}
	}
	return bad
}

func allowed(dep string, prefixes []string) bool {
	for _, p := range prefixes {
		if dep == strings.TrimSuffix(p, "/") || strings.HasPrefix(dep, strings.TrimSuffix(p, "/")+"/") {
			return true
		}
	}
	return false
}

// TestTracingNeedsNoSDK: the library packages trace through the
// OpenTelemetry API only (#36); the SDK and the exporters are the
// application's choice, used here by tests and examples alone.
func TestTracingNeedsNoSDK(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-deps", "./stage", "./bridge", "./clock", "./observer")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	api := false
	for _, p := range strings.Fields(string(out)) {
		if strings.HasPrefix(p, "go.opentelemetry.io/otel/sdk") || strings.HasPrefix(p, "go.opentelemetry.io/otel/exporters") {
			t.Errorf("a library package depends on %s", p)
		}
		api = api || p == "go.opentelemetry.io/otel/trace"
	}
	if !api {
		t.Error("no library package imports the tracing API; is this test still needed?")
	}
}
