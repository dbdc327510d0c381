package depcheck

import (
	"strings"
	"testing"
)

// TestNATSStaysInTheBridge: nats.go is imported by the bridge alone (and
// the example that demonstrates it, and the network-fault soak that
// drives it), and the bridge's build does not include nats-server, which
// only its tests, the example and the soak embed.
func TestNATSStaysInTheBridge(t *testing.T) {
	root := moduleRoot(t)
	list := func(args ...string) string { return goList(t, root, args...) }
	mayUseNATS := map[string]bool{
		module + "/bridge":               true,
		module + "/examples/nats-bridge": true,
		module + "/internal/rig/netsoak": true,
	}
	for _, line := range strings.Split(strings.TrimSpace(list("-f", "{{.ImportPath}} {{join .Imports \" \"}} {{join .TestImports \" \"}} {{join .XTestImports \" \"}}", "./...")), "\n") {
		pkg, imps, _ := strings.Cut(line, " ")
		if mayUseNATS[pkg] {
			continue
		}
		for _, imp := range strings.Fields(imps) {
			if strings.HasPrefix(imp, "github.com/nats-io/") {
				t.Errorf("%s imports %s; only the bridge may use NATS", pkg, imp)
			}
		}
	}
	deps := list("-deps", "-f", "{{.ImportPath}}", "./bridge")
	if !strings.Contains(deps, "github.com/nats-io/nats.go\n") {
		t.Fatal("the bridge does not depend on nats.go; is this check looking at the right package?")
	}
	for _, d := range strings.Fields(deps) {
		if strings.HasPrefix(d, "github.com/nats-io/nats-server") {
			t.Errorf("the bridge's build includes %s; nats-server is for tests only", d)
		}
	}
}
