package ops

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const unitFile = "systemd/parsley-observe.service"

// TestSystemdUnit: systemd-analyze verify accepts the unit without a
// single complaint (it exits 0 even on unknown keys, so any output fails
// the test), with the binary's path pointed at a stand-in executable, and
// the unit runs serve from the example config file and does not restart
// on a configuration error.
func TestSystemdUnit(t *testing.T) {
	b, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	unit := string(b)
	for _, want := range []string{
		"ExecStart=/usr/local/bin/parsley-observe serve --config /etc/parsley/parsley-observe.yaml\n",
		"RestartPreventExitStatus=2\n",
		"StateDirectory=parsley-observe\n",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("%s lacks %q", unitFile, want)
		}
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian: apt-get install systemd); the unit's syntax is unchecked")
	}
	standIn, err := exec.LookPath("true")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "parsley-observe.service")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(unit, "/usr/local/bin/parsley-observe", standIn)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(analyze, "verify", path).CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unitFile, err, out)
	}
}
