package excli

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/parsley-go/parsley/internal/buildinfo"
)

func TestBrokers(t *testing.T) {
	for _, tc := range []struct{ in, want, bad string }{
		{in: "", want: ""},
		{in: "  ", want: ""},
		{in: "k1:9092", want: "k1:9092"},
		{in: " k1:9092 , [::1]:9093", want: "k1:9092,[::1]:9093"},
		{in: "k1", bad: `"k1"`},
		{in: "k1:9092,", bad: `""`},
		{in: "k1:0", bad: `"k1:0"`},
		{in: "k1:http", bad: `"k1:http"`},
		{in: ":9092", bad: `":9092"`},
	} {
		got, err := Brokers(tc.in)
		switch {
		case tc.bad == "" && (err != nil || got != tc.want):
			t.Errorf("Brokers(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		case tc.bad != "" && (!errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), "invalid --brokers entry "+tc.bad)):
			t.Errorf("Brokers(%q) = %q, %v; want a usage error naming %s", tc.in, got, err, tc.bad)
		}
	}
}

func TestPrefix(t *testing.T) {
	for _, tc := range []struct{ in, bad string }{
		{in: ""},
		{in: "ex-1a2b3c-"},
		{in: "team.alice_2."},
		{in: "a/b", bad: `'/'`},
		{in: "a b", bad: `' '`},
		{in: "é", bad: `'é'`},
		{in: strings.Repeat("p", maxPrefix)},
		{in: strings.Repeat("p", maxPrefix+1), bad: "longer than"},
	} {
		got, err := Prefix(tc.in)
		switch {
		case tc.bad == "" && (err != nil || got != tc.in):
			t.Errorf("Prefix(%q) = %q, %v; want it back", tc.in, got, err)
		case tc.bad != "" && (!errors.Is(err, ErrUsage) || !strings.Contains(err.Error(), tc.bad)):
			t.Errorf("Prefix(%q) = %q, %v; want a usage error naming %s", tc.in, got, err, tc.bad)
		}
	}
	if p := RandomPrefix(); len(p) != len("ex-123456-") {
		t.Errorf("RandomPrefix() = %q", p)
	} else if _, err := Prefix(p); err != nil {
		t.Errorf("RandomPrefix() = %q, refused by Prefix: %v", p, err)
	}
}

// TestMain: --version prints the build information's line; a run prints
// where it connects first and exits 1 with the error on stderr; an
// unexpected argument exits 2.
func TestMainExits(t *testing.T) {
	env := func(string) string { return "" }
	var ran []string
	c := Command{Name: "ex", Summary: "an example", Run: func(_ context.Context, out io.Writer, t Target) error {
		ran = append(ran, t.Brokers)
		return errors.New("boom")
	}}
	var out, errs bytes.Buffer
	if code := Main(c, []string{"--version"}, env, &out, &errs); code != 0 || out.String() != buildinfo.String("ex")+"\n" {
		t.Fatalf("--version: exit %d, %q", code, out.String())
	}
	out.Reset()
	if code := Main(c, []string{"--brokers", "k1:9092"}, env, &out, &errs); code != 1 ||
		!strings.HasPrefix(out.String(), "connecting to k1:9092\nrun prefix \"ex-") || errs.String() != "ex: boom\n" || len(ran) != 1 {
		t.Fatalf("failing run: exit %d, stdout %q, stderr %q, runs %q", code, out.String(), errs.String(), ran)
	}
	out.Reset()
	errs.Reset()
	if code := Main(c, []string{"extra"}, env, &out, &errs); code != 2 || !strings.Contains(errs.String(), `unexpected argument "extra"`) || len(ran) != 1 {
		t.Fatalf("extra argument: exit %d, stderr %q, runs %q", code, errs.String(), ran)
	}
}
