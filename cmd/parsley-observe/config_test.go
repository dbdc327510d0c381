package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
	"github.com/urfave/cli/v2/altsrc"
)

// captured is what a command saw for each of its flags.
type captured map[string]any

// capturing returns the app with every command's action replaced by one
// that records the value of each flag, so a test can see what the command
// line, environment and config file made of them without running it.
func capturing(t *testing.T) (*cli.App, map[string]captured) {
	t.Helper()
	a := app()
	a.Writer, a.ErrWriter = io.Discard, io.Discard
	seen := map[string]captured{}
	for _, cmd := range a.Commands {
		cmd.Action = func(c *cli.Context) error {
			got := captured{}
			for _, f := range cmd.Flags {
				n := f.Names()[0]
				got[n] = c.Value(n)
			}
			seen[cmd.Name] = got
			return nil
		}
	}
	return a, seen
}

// sample is a value for flag f unlike its default, as the config file
// would give it, and the value the command should then see.
func sample(t *testing.T, f cli.Flag) (file any, want any) {
	t.Helper()
	n := f.Names()[0]
	if n == "log-format" { // checked before the action runs
		return "json", "json"
	}
	switch f.(type) {
	case *altsrc.StringFlag:
		return "v-" + n, "v-" + n
	case *altsrc.StringSliceFlag:
		return []any{"a-" + n, "b-" + n}, []string{"a-" + n, "b-" + n}
	case *altsrc.BoolFlag:
		return true, true
	case *altsrc.IntFlag:
		return 7, 7
	case *altsrc.Int64Flag:
		return 9, int64(9)
	case *altsrc.DurationFlag:
		return "3s", 3 * time.Second
	}
	t.Fatalf("flag --%s: type %T has no sample; add one", n, f)
	return nil, nil
}

func commandFlags(c *cli.Command) []cli.Flag {
	var out []cli.Flag
	for _, f := range c.Flags {
		if n := f.Names()[0]; n != configFlagName && n != "help" {
			out = append(out, f)
		}
	}
	return out
}

// writeConfig writes values as a YAML or TOML file.
func writeConfig(t *testing.T, ext string, values map[string]any) string {
	t.Helper()
	var b strings.Builder
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := values[k]
		if ext == ".toml" {
			k = fmt.Sprintf("%q", k)
		}
		switch v := v.(type) {
		case string:
			fmt.Fprintf(&b, "%s %s %q\n", k, sep(ext), v)
		case []any:
			var items []string
			for _, it := range v {
				items = append(items, fmt.Sprintf("%q", it))
			}
			fmt.Fprintf(&b, "%s %s [%s]\n", k, sep(ext), strings.Join(items, ", "))
		default:
			fmt.Fprintf(&b, "%s %s %v\n", k, sep(ext), v)
		}
	}
	p := filepath.Join(t.TempDir(), "observe"+ext)
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func sep(ext string) string {
	if ext == ".toml" {
		return "="
	}
	return ":"
}

// TestEveryFlagComesFromTheConfigFile: every flag of every command, this
// file's and any added later, has an environment variable and takes its
// value from a YAML or a TOML config file.
func TestEveryFlagComesFromTheConfigFile(t *testing.T) {
	for _, cmd := range app().Commands {
		for _, f := range commandFlags(cmd) {
			if _, ok := f.(altsrc.FlagInputSourceExtension); !ok {
				t.Errorf("%s --%s (%T) cannot come from the config file: add its type to fromConfigFile", cmd.Name, f.Names()[0], f)
			}
			if ev, ok := f.(interface{ GetEnvVars() []string }); !ok || len(ev.GetEnvVars()) == 0 {
				t.Errorf("%s --%s has no environment variable", cmd.Name, f.Names()[0])
			}
		}
	}
	for _, ext := range []string{".yaml", ".toml"} {
		for _, cmd := range app().Commands {
			t.Run(cmd.Name+ext, func(t *testing.T) {
				file, want := map[string]any{}, map[string]any{}
				for _, f := range commandFlags(cmd) {
					n := f.Names()[0]
					file[n], want[n] = sample(t, f)
				}
				path := writeConfig(t, ext, file)
				a, seen := capturing(t)
				if err := a.Run([]string{"parsley-observe", cmd.Name, "--config", path}); err != nil {
					t.Fatal(err)
				}
				for n, w := range want {
					if g := seen[cmd.Name][n]; !reflect.DeepEqual(normalize(g), w) {
						t.Errorf("--%s: got %#v from the config file, want %#v", n, g, w)
					}
				}
			})
		}
	}
}

// normalize turns the flag values urfave/cli keeps into plain Go values.
func normalize(v any) any {
	if s, ok := v.(cli.StringSlice); ok {
		return s.Value()
	}
	if s, ok := v.(*cli.StringSlice); ok {
		return s.Value()
	}
	return v
}

// TestConfigFilePrecedence: the command line beats the environment,
// which beats the file, which beats the default.
func TestConfigFilePrecedence(t *testing.T) {
	path := writeConfig(t, ".yaml", map[string]any{"listen": "from-file:1", "refresh": "7s", "db": "file.db", "sasl-user": "file-user"})
	t.Setenv("PARSLEY_REFRESH", "8s")
	t.Setenv("PARSLEY_OBSERVER_DB", "env.db")
	a, seen := capturing(t)
	if err := a.Run([]string{"parsley-observe", "serve", "--config", path, "--db", "flag.db"}); err != nil {
		t.Fatal(err)
	}
	got := seen["serve"]
	for n, want := range map[string]any{"listen": "from-file:1", "refresh": 8 * time.Second, "db": "flag.db", "sasl-user": "file-user", "max-records": int64(5_000_000)} {
		if got[n] != want {
			t.Errorf("--%s = %#v, want %#v", n, got[n], want)
		}
	}
	// PARSLEY_CONFIG names the file as --config does.
	t.Setenv("PARSLEY_CONFIG", path)
	a, seen = capturing(t)
	if err := a.Run([]string{"parsley-observe", "serve"}); err != nil {
		t.Fatal(err)
	}
	if got := seen["serve"]["listen"]; got != "from-file:1" {
		t.Errorf("with PARSLEY_CONFIG: --listen = %#v, want from-file:1", got)
	}
}

// TestConfigFileErrorsExitTwo: an unknown key, a value of the wrong type,
// an unknown format or a missing file exits 2, naming the file and what is
// wrong; a key another command knows is accepted (one file serves serve
// and scan).
func TestConfigFileErrorsExitTwo(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, path string
		says       []string
	}{
		{"unknown key", write("typo.yaml", "brokers: [a:1]\ntls-cafile: x\n"), []string{"typo.yaml", "unknown setting tls-cafile"}},
		{"nested key", write("nested.yaml", "tls:\n  ca: x\n"), []string{"nested.yaml", "tls"}},
		{"wrong type", write("type.yaml", "refresh: [1, 2]\n"), []string{"type.yaml", "refresh"}},
		{"bad yaml", write("bad.yaml", "brokers: [a\n"), []string{"bad.yaml"}},
		{"bad toml", write("bad.toml", "brokers = \n"), []string{"bad.toml"}},
		{"unknown format", write("conf.ini", "brokers=a\n"), []string{"conf.ini", ".ini"}},
		{"missing file", filepath.Join(dir, "none.yaml"), []string{"none.yaml", "no such file"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, seen := capturing(t)
			err := a.Run([]string{"parsley-observe", "serve", "--config", tc.path})
			var ec cli.ExitCoder
			if !errors.As(err, &ec) || ec.ExitCode() != 2 {
				t.Fatalf("err %v; want exit 2", err)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
			if seen["serve"] != nil {
				t.Error("the command ran despite the bad config file")
			}
		})
	}
	shared := write("shared.yaml", "brokers: [a:1]\nfail-on: error\nlisten: 127.0.0.1:9\n")
	a, seen := capturing(t)
	if err := a.Run([]string{"parsley-observe", "serve", "--config", shared}); err != nil {
		t.Fatalf("serve with scan's fail-on in the file: %v", err)
	}
	if seen["serve"]["listen"] != "127.0.0.1:9" {
		t.Errorf("listen = %#v", seen["serve"]["listen"])
	}
}

// TestOpsConfigExampleLoads: the example config file the systemd unit and
// the Kubernetes manifest use is one this command accepts, and sets the
// settings they rely on.
func TestOpsConfigExampleLoads(t *testing.T) {
	path := "../../ops/config/parsley-observe.yaml"
	a, seen := capturing(t)
	if err := a.Run([]string{"parsley-observe", "serve", "--config", path}); err != nil {
		t.Fatal(err)
	}
	got := seen["serve"]
	if got["listen"] == "127.0.0.1:8080" || got["sasl-mechanism"] == "" || got["tls-ca"] == "" || got["log-format"] != "json" {
		t.Errorf("%s sets listen %v, sasl-mechanism %v, tls-ca %v, log-format %v: want a non-loopback listener, SASL over TLS, json logs", path,
			got["listen"], got["sasl-mechanism"], got["tls-ca"], got["log-format"])
	}
}
