package depcheck

import (
	"slices"
	"strings"
	"testing"
)

// The module's floors, by package path (docs/architecture.md). The runtime
// is what an application links: the public packages and the internals
// they are built on. Above it stands everything that exists for tests,
// examples, soaks, commands and benchmarks, which may import anything of
// the module; nothing of the runtime imports it. Every package is named on
// one floor or the other, so a new package is placed on purpose.

// runtimePkgs are the runtime's packages, by path below the module.
var runtimePkgs = []string{
	"headers", "clock", "protocol", "stage", "bridge", "observer", "observer/web", "view",
	"internal/state", "internal/wait", "internal/kclient", "internal/kafkahash", "internal/kafkasec", "internal/buildinfo",
}

// runtimeInternals are the runtime's lowest floor: its internal packages,
// which import of the module only headers, protocol and each other.
var runtimeInternals = []string{
	"internal/state", "internal/wait", "internal/kclient", "internal/kafkahash", "internal/kafkasec", "internal/buildinfo",
}

// abovePkgs are the trees, by path below the module, that stand above the
// runtime: the test rigs (the embedded cluster, the soaks, the launchers,
// the host simulator's model, the demo topology and the test codecs), the
// simulator and conformance kit, the stage's test driver, the commands,
// the examples, the adapters' test kit, the benchmarks, the operations
// files' tests and this package.
var abovePkgs = []string{
	"internal/rig", "internal/depcheck", "sim", "stage/stagetest", "cmd", "examples", "adapters", "bench", "ops",
}

// rel is pkg's path below the module, and whether it is the module's.
func rel(pkg string) (string, bool) {
	return strings.CutPrefix(pkg, module+"/")
}

func isRuntime(pkg string) bool {
	r, ok := rel(pkg)
	return ok && slices.Contains(runtimePkgs, r)
}

func isRuntimeInternal(pkg string) bool {
	r, ok := rel(pkg)
	return ok && slices.Contains(runtimeInternals, r)
}

func isAbove(pkg string) bool {
	r, ok := rel(pkg)
	if !ok {
		return false
	}
	for _, a := range abovePkgs {
		if r == a || strings.HasPrefix(r, a+"/") {
			return true
		}
	}
	return false
}

// importGraph lists pkgs' direct imports: package → imports.
func importGraph(t *testing.T, pkgs ...string) map[string][]string {
	t.Helper()
	out := goList(t, moduleRoot(t), append([]string{"-f", "{{.ImportPath}}:{{join .Imports \" \"}}"}, pkgs...)...)
	g := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if pkg, imps, ok := strings.Cut(line, ":"); ok {
			g[pkg] = strings.Fields(imps)
		}
	}
	return g
}

// crossings returns "pkg imports imp" for each import in g of a package
// that from holds of, of a module package (or the standard library's
// testing) that may does not hold of.
func crossings(g map[string][]string, from, may func(string) bool) []string {
	var bad []string
	for _, pkg := range slices.Sorted(func(yield func(string) bool) {
		for p := range g {
			if !yield(p) {
				return
			}
		}
	}) {
		if !from(pkg) {
			continue
		}
		for _, imp := range g[pkg] {
			if _, mod := rel(imp); (mod || imp == "testing") && !may(imp) {
				bad = append(bad, pkg+" imports "+imp)
			}
		}
	}
	return bad
}

func runtimePatterns() []string {
	out := make([]string, len(runtimePkgs))
	for i, p := range runtimePkgs {
		out[i] = "./" + p
	}
	return out
}

// TestEveryPackageStandsOnAFloor: each package of the module is the
// runtime's or stands above it, and each package the floors name exists.
func TestEveryPackageStandsOnAFloor(t *testing.T) {
	all := strings.Fields(goList(t, moduleRoot(t), "-f", "{{.ImportPath}}", "./..."))
	for _, p := range all {
		if isRuntime(p) == isAbove(p) {
			t.Errorf("%s stands on no floor, or on both: name it in runtimePkgs or under abovePkgs", p)
		}
	}
	for _, r := range runtimePkgs {
		if !slices.Contains(all, module+"/"+r) {
			t.Errorf("runtime package %s does not exist", r)
		}
	}
	for _, r := range runtimeInternals {
		if !slices.Contains(runtimePkgs, r) {
			t.Errorf("runtime internal %s is not among the runtime's packages", r)
		}
	}
}

// TestRuntimeImportsOnlyTheRuntime: no runtime package (production code,
// not its tests) imports anything above the runtime — a test rig under
// internal/rig, the simulator, stagetest, a command, an example, an
// adapter, a benchmark — nor the testing package. Each runtime package's
// direct imports are checked, and the runtime is closed under them, so
// nothing above is reached through another package either.
func TestRuntimeImportsOnlyTheRuntime(t *testing.T) {
	g := importGraph(t, runtimePatterns()...)
	if len(g) != len(runtimePkgs) {
		t.Fatalf("go list named %d runtime packages, want %d", len(g), len(runtimePkgs))
	}
	for _, b := range crossings(g, isRuntime, isRuntime) {
		t.Errorf("%s: the runtime imports only the runtime (docs/architecture.md)", b)
	}
}

// TestRuntimeInternalsStayBelow: the runtime's internal packages import of
// the module only headers, protocol and each other: no arrow runs from
// them back up to stage, bridge, observer, view or clock.
func TestRuntimeInternalsStayBelow(t *testing.T) {
	pats := make([]string, len(runtimeInternals))
	for i, p := range runtimeInternals {
		pats[i] = "./" + p
	}
	g := importGraph(t, pats...)
	if _, ok := g[module+"/internal/state"]; !ok {
		t.Fatal("internal/state missing from the graph; is this check looking at the right packages?")
	}
	may := func(p string) bool {
		return isRuntimeInternal(p) || p == module+"/headers" || p == module+"/protocol"
	}
	for _, b := range crossings(g, isRuntimeInternal, may) {
		t.Errorf("%s: a runtime internal imports of the module only headers, protocol and the other internals", b)
	}
}

// The rules above catch what they are for, on graphs made to break them.
func TestCrossingsFindTheArrowsUp(t *testing.T) {
	m := func(p string) string { return module + "/" + p }
	tests := []struct {
		name string
		g    map[string][]string
		from func(string) bool
		may  func(string) bool
		want int
	}{
		{"runtime imports a rig", map[string][]string{m("internal/state"): {m("internal/rig/broker")}}, isRuntime, isRuntime, 1},
		{"stage imports stagetest and sim", map[string][]string{m("stage"): {m("stage/stagetest"), m("sim"), m("protocol")}}, isRuntime, isRuntime, 2},
		{"observer imports testing", map[string][]string{m("observer"): {"testing", "fmt"}}, isRuntime, isRuntime, 1},
		{"view imports the runtime", map[string][]string{m("view"): {m("internal/state"), m("clock"), "github.com/twmb/franz-go/pkg/kgo"}}, isRuntime, isRuntime, 0},
		{"a rig imports the runtime", map[string][]string{m("internal/rig/netsoak"): {m("stage"), m("internal/rig/broker")}}, isRuntime, isRuntime, 0},
		{"a command imports a rig", map[string][]string{m("cmd/parsley-observe"): {m("internal/rig/obsdemo")}}, isRuntime, isRuntime, 0},
		{"an internal imports stage", map[string][]string{m("internal/kclient"): {m("stage")}}, isRuntimeInternal, func(p string) bool { return isRuntimeInternal(p) || p == m("protocol") }, 1},
	}
	for _, tt := range tests {
		if got := crossings(tt.g, tt.from, tt.may); len(got) != tt.want {
			t.Errorf("%s: crossings = %q, want %d", tt.name, got, tt.want)
		}
	}
	for _, p := range []string{m("internal/rig/broker"), m("internal/rig"), m("stage/stagetest"), m("bench/streamspeer")} {
		if isRuntime(p) || !isAbove(p) {
			t.Errorf("%s: runtime %v, above %v; want above only", p, isRuntime(p), isAbove(p))
		}
	}
	for _, p := range []string{m("stage"), m("internal/state"), m("observer/web")} {
		if !isRuntime(p) || isAbove(p) {
			t.Errorf("%s: runtime %v, above %v; want the runtime only", p, isRuntime(p), isAbove(p))
		}
	}
}
