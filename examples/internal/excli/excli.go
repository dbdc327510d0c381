// Package excli gives every example the same command line: --brokers (or
// PARSLEY_BROKERS) to use a real cluster instead of the embedded broker,
// --prefix for the names a run uses there, --version, --help that prints
// to standard output and exits 0, and usage errors that name the flag and
// exit 2.
package excli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/parsley-go/parsley/internal/buildinfo"
)

// BrokersEnv is the environment variable that stands in for --brokers.
const BrokersEnv = "PARSLEY_BROKERS"

// ErrUsage marks a command line the example refuses.
var ErrUsage = errors.New("usage")

// Command is one example's command line.
type Command struct {
	Name    string // the command's name, as in `go run ./examples/<Name>`
	Summary string // what it does, for --help

	// Flags declares the example's own flags on fs, and returns the check
	// to run once they are parsed (nil: none).
	Flags func(fs *flag.FlagSet) (check func() error)

	// Run runs the example against t.
	Run func(ctx context.Context, out io.Writer, t Target) error

	// Timeout bounds the whole run (default two minutes).
	Timeout time.Duration
}

// Target is where a run goes and what it names there.
type Target struct {
	// Brokers is the validated, comma-separated seed broker list, empty
	// for the embedded broker.
	Brokers string
	// Prefix starts the name of every topic, consumer group and
	// transactional ID the run uses, so that on a shared cluster it never
	// reads or writes anyone else's. Empty on the embedded broker unless
	// --prefix says otherwise.
	Prefix string
	// Chosen reports that the prefix came from --prefix: the run leaves
	// what it created for a later look (or a later run). A generated
	// prefix is never seen again, so the run deletes what it created.
	Chosen bool
}

// Name returns name under the run's prefix.
func (t Target) Name(name string) string { return t.Prefix + name }

// Main parses args, runs c and returns the process's exit status: 0 after
// --help, --version or a successful run, 2 for a command line it refuses,
// 1 when the run fails. getenv reads the environment (os.Getenv).
func Main(c Command, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), orDefault(c.Timeout, 2*time.Minute))
	defer cancel()
	t, ok, err := Parse(c, args, getenv, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", c.Name, err, c.Name)
		return 2
	}
	if !ok {
		return 0
	}
	if t.Brokers != "" {
		fmt.Fprintf(stdout, "connecting to %s\n", t.Brokers)
	} else {
		fmt.Fprintln(stdout, "starting the embedded broker (pass --brokers or set "+BrokersEnv+" for a real cluster)")
	}
	switch {
	case t.Chosen:
		fmt.Fprintf(stdout, "run prefix %q (--prefix): this run's topics stay on the cluster when it ends\n", t.Prefix)
	case t.Prefix != "":
		fmt.Fprintf(stdout, "run prefix %q: every topic, group and transactional ID of this run starts with it; they are deleted when it ends (--prefix to choose one and keep them)\n", t.Prefix)
	}
	if err := c.Run(ctx, stdout, t); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", c.Name, err)
		return 1
	}
	return 0
}

// Parse parses args for c. It returns the run's target and whether to run:
// false after it printed --help or --version to stdout. A refused command
// line is an error wrapping ErrUsage.
func Parse(c Command, args []string, getenv func(string) string, stdout io.Writer) (t Target, run bool, err error) {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	// Parse reports errors; --help is printed below, to stdout.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var brokers, prefix string
	fs.StringVar(&brokers, "brokers", getenv(BrokersEnv), "seed brokers `host:port,...`; empty runs the embedded broker (default $"+BrokersEnv+")")
	fs.StringVar(&prefix, "prefix", "", "start every topic, group and transactional ID with `prefix`, and keep this run's topics\n(default with --brokers: a random ex-XXXXXX-, deleted at the end; none on the embedded broker)")
	version := fs.Bool("version", false, "print the version and exit")
	var check func() error
	if c.Flags != nil {
		check = c.Flags(fs)
	}
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		usage(c, fs, stdout)
		return Target{}, false, nil
	} else if err != nil {
		return Target{}, false, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return Target{}, false, fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
	}
	if *version {
		fmt.Fprintln(stdout, buildinfo.String(c.Name))
		return Target{}, false, nil
	}
	if t.Brokers, err = Brokers(brokers); err != nil {
		return Target{}, false, err
	}
	fs.Visit(func(f *flag.Flag) { t.Chosen = t.Chosen || f.Name == "prefix" })
	switch {
	case t.Chosen:
		if t.Prefix, err = Prefix(prefix); err != nil {
			return Target{}, false, err
		}
	case t.Brokers != "":
		t.Prefix = RandomPrefix()
	}
	if check != nil {
		if err := check(); err != nil {
			return Target{}, false, err
		}
	}
	return t, true, nil
}

// maxPrefix leaves room under Kafka's 249-character topic name limit for
// the longest name an example derives (a stage's changelog topic).
const maxPrefix = 100

// Prefix checks a run prefix: up to 100 of the characters Kafka allows in
// a topic name (ASCII letters, digits, '.', '_' and '-'). Empty is valid:
// the run uses plain names.
func Prefix(p string) (string, error) {
	if len(p) > maxPrefix {
		return "", fmt.Errorf("%w: invalid --prefix %q: longer than %d characters", ErrUsage, p, maxPrefix)
	}
	for _, r := range p {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return "", fmt.Errorf("%w: invalid --prefix %q: %q is not allowed in a Kafka topic name (want letters, digits, '.', '_' or '-')", ErrUsage, p, r)
		}
	}
	return p, nil
}

// RandomPrefix returns a fresh run prefix, "ex-" and six hex digits and a
// dash: short enough to read, random enough that runs do not meet.
func RandomPrefix() string {
	var b [3]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return "ex-" + hex.EncodeToString(b[:]) + "-"
}

func usage(c Command, fs *flag.FlagSet, w io.Writer) {
	fmt.Fprintf(w, "Usage: go run ./examples/%s [flags]\n\n%s\n\nFlags:\n", c.Name, c.Summary)
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

// Brokers checks a comma-separated seed broker list — every entry a
// host:port with a port from 1 to 65535 — and returns it without blanks.
// An empty list is valid: it means the embedded broker.
func Brokers(list string) (string, error) {
	if strings.TrimSpace(list) == "" {
		return "", nil
	}
	var out []string
	for b := range strings.SplitSeq(list, ",") {
		b = strings.TrimSpace(b)
		host, port, err := net.SplitHostPort(b)
		if err != nil {
			return "", fmt.Errorf("%w: invalid --brokers entry %q: want host:port", ErrUsage, b)
		}
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 || host == "" {
			return "", fmt.Errorf("%w: invalid --brokers entry %q: want host:port with a port from 1 to 65535", ErrUsage, b)
		}
		out = append(out, b)
	}
	return strings.Join(out, ","), nil
}

// IntRange checks that flag --name's value v is within [lo, hi].
func IntRange(name string, v, lo, hi int) error {
	if v < lo || v > hi {
		return fmt.Errorf("%w: invalid --%s %d: must be from %d to %d", ErrUsage, name, v, lo, hi)
	}
	return nil
}

// DurationRange checks that flag --name's value d is within [lo, hi].
func DurationRange(name string, d, lo, hi time.Duration) error {
	if d < lo || d > hi {
		return fmt.Errorf("%w: invalid --%s %v: must be from %v to %v", ErrUsage, name, d, lo, hi)
	}
	return nil
}

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}
