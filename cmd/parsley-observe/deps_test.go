package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies: the observer and its command import, outside this
// module and the standard library, only what the project allows —
// franz-go, modernc.org/sqlite, urfave/cli (with its config-file parsers),
// the Prometheus client and bcrypt (golang.org/x/crypto, for the
// acknowledging users file) —
// and the browser-test driver (chromedp) stays out of the binary.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}} {{join .Imports \" \"}}{{end}}", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	const mod = "github.com/parsley-go/parsley/"
	// yaml.v3 and BurntSushi/toml are urfave/cli's altsrc parsers, which
	// the command also uses to list a config file's keys.
	allowed := []string{mod, "github.com/twmb/franz-go/", "modernc.org/sqlite", "github.com/urfave/cli/v2", "github.com/prometheus/client_golang/",
		"gopkg.in/yaml.v3", "github.com/BurntSushi/toml", "golang.org/x/crypto/bcrypt"}
	nonStd := map[string]bool{}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	for _, l := range lines {
		nonStd[strings.Fields(l)[0]] = true
	}
	checked := 0
	for _, l := range lines {
		f := strings.Fields(l)
		if !strings.HasPrefix(f[0], mod) {
			continue // a dependency's own imports are its business
		}
		checked++
		for _, imp := range f[1:] {
			if !nonStd[imp] {
				continue
			}
			ok := false
			for _, p := range allowed {
				ok = ok || strings.HasPrefix(imp, p)
			}
			if !ok {
				t.Errorf("%s imports %s, which is not an allowed dependency", f[0], imp)
			}
		}
	}
	if checked < 4 {
		t.Fatalf("checked only %d module packages; is go list working?", checked)
	}
	if strings.Contains(string(out), "chromedp") {
		t.Error("chromedp is linked into parsley-observe; it is for tests only")
	}
}

// TestNoTestHooksInTheBinary: the test-only helpers (internal/rig/obstest,
// which imports testing) and the testing package stay out of the binary.
func TestNoTestHooksInTheBinary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list -deps gave %d packages; is go list working?", len(deps))
	}
	for _, d := range deps {
		if d == "testing" || strings.HasSuffix(d, "/internal/rig/obstest") {
			t.Errorf("parsley-observe links %s, which is for tests only", d)
		}
	}
}
