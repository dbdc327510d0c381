// Package extest holds what every example's tests check the same way: the
// shared command line, and that a run leaves no file behind.
package extest

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/parsley-go/parsley/examples/internal/excli"
)

// CommandLine checks c's command line: --help prints a usage naming
// --brokers, $PARSLEY_BROKERS and every flag in flags to stdout and exits 0;
// PARSLEY_BROKERS is the default of --brokers and --brokers overrides it;
// bad (a refused command line) exits 2 with a message on stderr that
// contains want, without running anything.
func CommandLine(t *testing.T, c excli.Command, flags []string, bad []string, want string) {
	t.Helper()
	noEnv := func(string) string { return "" }
	c.Run = func(context.Context, io.Writer, string) error {
		t.Errorf("Main ran the example") // --help and a refused command line never run
		return nil
	}

	var out, errs bytes.Buffer
	if code := excli.Main(c, []string{"--help"}, noEnv, &out, &errs); code != 0 || errs.Len() != 0 {
		t.Fatalf("--help: exit %d, stderr %q; want 0 and nothing", code, errs.String())
	}
	for _, f := range append([]string{"-brokers", "PARSLEY_BROKERS", "-version"}, flags...) {
		if !strings.Contains(out.String(), f) {
			t.Errorf("--help does not mention %s:\n%s", f, out.String())
		}
	}

	env := func(k string) string {
		if k == excli.BrokersEnv {
			return "kafka-1:9092, kafka-2:9092"
		}
		return ""
	}
	if b, ok, err := excli.Parse(c, nil, env, &out); err != nil || !ok || b != "kafka-1:9092,kafka-2:9092" {
		t.Errorf("with %s set: brokers %q, run %v, err %v; want the variable's brokers", excli.BrokersEnv, b, ok, err)
	}
	if b, _, err := excli.Parse(c, []string{"--brokers", "k:1"}, env, &out); err != nil || b != "k:1" {
		t.Errorf("--brokers k:1 with %s set: brokers %q, err %v; want the flag's", excli.BrokersEnv, b, err)
	}

	out.Reset()
	errs.Reset()
	if code := excli.Main(c, bad, noEnv, &out, &errs); code != 2 || !strings.Contains(errs.String(), want) || out.Len() != 0 {
		t.Errorf("%q: exit %d, stdout %q, stderr %q; want 2 and a message with %q", bad, code, out.String(), errs.String(), want)
	}
}

// NoLeftovers points the temporary directory ($TMPDIR) of the test at an
// empty directory and fails the test if anything is left in it when the
// test ends: an example's temporary state must go with it.
func NoLeftovers(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("TMPDIR", dir)
	t.Cleanup(func() {
		left, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range left {
			t.Errorf("left behind in the temporary directory: %s", e.Name())
		}
	})
}
