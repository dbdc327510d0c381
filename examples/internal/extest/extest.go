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
// --brokers, $PARSLEY_BROKERS, --prefix and every flag in flags to stdout
// and exits 0; PARSLEY_BROKERS is the default of --brokers and --brokers
// overrides it; a real cluster gets a fresh generated run prefix, the
// embedded broker none, and --prefix is checked and kept; bad (a refused
// command line) exits 2 with a message on stderr that contains want,
// without running anything.
func CommandLine(t *testing.T, c excli.Command, flags []string, bad []string, want string) {
	t.Helper()
	noEnv := func(string) string { return "" }
	c.Run = func(context.Context, io.Writer, excli.Target) error {
		t.Errorf("Main ran the example") // --help and a refused command line never run
		return nil
	}

	var out, errs bytes.Buffer
	if code := excli.Main(c, []string{"--help"}, noEnv, &out, &errs); code != 0 || errs.Len() != 0 {
		t.Fatalf("--help: exit %d, stderr %q; want 0 and nothing", code, errs.String())
	}
	for _, f := range append([]string{"-brokers", "PARSLEY_BROKERS", "-prefix", "-version"}, flags...) {
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
	tg, ok, err := excli.Parse(c, nil, env, &out)
	if err != nil || !ok || tg.Brokers != "kafka-1:9092,kafka-2:9092" {
		t.Errorf("with %s set: brokers %q, run %v, err %v; want the variable's brokers", excli.BrokersEnv, tg.Brokers, ok, err)
	}
	if !strings.HasPrefix(tg.Prefix, "ex-") || tg.Chosen {
		t.Errorf("with %s set: prefix %q, chosen %v; want a generated ex-… prefix", excli.BrokersEnv, tg.Prefix, tg.Chosen)
	}
	if again, _, _ := excli.Parse(c, nil, env, &out); again.Prefix == tg.Prefix {
		t.Errorf("two runs got the same generated prefix %q", tg.Prefix)
	}
	if tg, _, err := excli.Parse(c, []string{"--brokers", "k:1"}, env, &out); err != nil || tg.Brokers != "k:1" {
		t.Errorf("--brokers k:1 with %s set: brokers %q, err %v; want the flag's", excli.BrokersEnv, tg.Brokers, err)
	}
	if tg, _, err := excli.Parse(c, nil, noEnv, &out); err != nil || tg.Prefix != "" {
		t.Errorf("embedded broker: prefix %q, err %v; want plain names", tg.Prefix, err)
	}
	if tg, _, err := excli.Parse(c, []string{"--prefix", "mine."}, env, &out); err != nil || tg.Prefix != "mine." || !tg.Chosen {
		t.Errorf("--prefix mine.: prefix %q, chosen %v, err %v; want it kept as chosen", tg.Prefix, tg.Chosen, err)
	}
	out.Reset()
	errs.Reset()
	if code := excli.Main(c, []string{"--prefix", "a/b"}, noEnv, &out, &errs); code != 2 || !strings.Contains(errs.String(), `invalid --prefix "a/b"`) {
		t.Errorf("--prefix a/b: exit %d, stderr %q; want 2 and a message naming the prefix", code, errs.String())
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
