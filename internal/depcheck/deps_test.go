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
	{"clock", []string{module + "/headers", module + "/clock", "github.com/twmb/franz-go/"}},
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
		cmd := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./"+l.pkg+"/...")
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list %s: %v", l.pkg, err)
		}
		for _, dep := range strings.Fields(string(out)) {
			if !allowed(dep, l.allowed) {
				t.Errorf("%s imports %s; it may import only the standard library and %v", l.pkg, dep, l.allowed)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no layer found to check; is the test running from internal/depcheck?")
	}
}

func allowed(dep string, prefixes []string) bool {
	for _, p := range prefixes {
		if dep == strings.TrimSuffix(p, "/") || strings.HasPrefix(dep, strings.TrimSuffix(p, "/")+"/") {
			return true
		}
	}
	return false
}
