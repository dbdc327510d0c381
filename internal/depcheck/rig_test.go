package depcheck

import (
	"strings"
	"testing"
)

// rigs is the tree of test rigs: the soaks, their verification kit and the
// launchers. They sit above everything they test, so they may import any
// package; nothing of the runtime may import them (see isTestHook).
const rigs = module + "/internal/rig"

// runtimeInternals are the runtime's own lowest layer under internal/: the
// packages stage, bridge, clock and observer build on. The embedded broker
// belongs here too: the examples and parsley-observe's demo run on it, and
// it imports nothing of the module.
var runtimeInternals = []string{
	"aliascodec", "broker", "buildinfo", "kafkahash", "kafkasec", "kclient", "obsdemo", "state", "wait",
}

// above lists what sits above the runtime's internals: an import of any of
// them from there would be an arrow running back up.
var above = []string{
	module + "/stage", module + "/bridge", module + "/observer", module + "/cmd",
	module + "/examples", module + "/adapters", rigs,
}

// TestRuntimeInternalsImportNothingAbove: the runtime's internal packages
// (production code, not their tests) import no stage, bridge, observer,
// command, example, adapter or test rig, so internal/ holds no arrow that
// runs back up the package picture.
func TestRuntimeInternalsImportNothingAbove(t *testing.T) {
	root := moduleRoot(t)
	pkgs := make([]string, len(runtimeInternals))
	for i, p := range runtimeInternals {
		pkgs[i] = "./internal/" + p + "/..."
	}
	out := goList(t, root, append([]string{"-deps", "-f", "{{if not .Standard}}{{.ImportPath}}:{{join .Imports \" \"}}{{end}}"}, pkgs...)...)
	bad := violationsAbove(out)
	for _, b := range bad {
		t.Errorf("runtime internal package imports %s", b)
	}
	if !strings.Contains(out, module+"/internal/state:") {
		t.Fatal("internal/state missing from the graph; is this check looking at the right packages?")
	}
}

// violationsAbove returns each import, in a go list graph of "pkg:imp imp"
// lines, of a package in above by a package of the module not itself in
// above.
func violationsAbove(graph string) []string {
	isAbove := func(p string) bool {
		for _, a := range above {
			if p == a || strings.HasPrefix(p, a+"/") {
				return true
			}
		}
		return false
	}
	var bad []string
	for _, line := range strings.Split(strings.TrimSpace(graph), "\n") {
		pkg, imps, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(pkg, module+"/") || isAbove(pkg) {
			continue
		}
		for _, imp := range strings.Fields(imps) {
			if isAbove(imp) {
				bad = append(bad, imp+" (from "+pkg+")")
			}
		}
	}
	return bad
}

func TestViolationsAboveFindsAnArrowBackUp(t *testing.T) {
	tests := []struct {
		graph string
		want  int
	}{
		{module + "/internal/state:" + module + "/internal/wait github.com/x/y", 0},
		{module + "/internal/state:" + module + "/stage", 1},
		{module + "/internal/broker:" + rigs + "/testkafka " + module + "/bridge", 2},
		{module + "/stage:" + module + "/internal/state", 0},
		{rigs + "/netsoak:" + module + "/stage", 0},
	}
	for _, tt := range tests {
		if got := violationsAbove(tt.graph); len(got) != tt.want {
			t.Errorf("violationsAbove(%q) = %q, want %d", tt.graph, got, tt.want)
		}
	}
}
