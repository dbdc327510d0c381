// Package excli gives every example the same command line: --brokers (or
// PARSLEY_BROKERS) to use a real cluster instead of the embedded broker,
// --version, --help that prints to standard output and exits 0, and usage
// errors that name the flag and exit 2.
package excli

import (
	"context"
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

	// Run runs the example; brokers is the validated, comma-separated
	// seed broker list, empty for the embedded broker.
	Run func(ctx context.Context, out io.Writer, brokers string) error

	// Timeout bounds the whole run (default two minutes).
	Timeout time.Duration
}

// Main parses args, runs c and returns the process's exit status: 0 after
// --help, --version or a successful run, 2 for a command line it refuses,
// 1 when the run fails. getenv reads the environment (os.Getenv).
func Main(c Command, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), orDefault(c.Timeout, 2*time.Minute))
	defer cancel()
	brokers, ok, err := Parse(c, args, getenv, stdout)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", c.Name, err, c.Name)
		return 2
	}
	if !ok {
		return 0
	}
	if brokers != "" {
		fmt.Fprintf(stdout, "connecting to %s\n", brokers)
	} else {
		fmt.Fprintln(stdout, "starting the embedded broker (pass --brokers or set "+BrokersEnv+" for a real cluster)")
	}
	if err := c.Run(ctx, stdout, brokers); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", c.Name, err)
		return 1
	}
	return 0
}

// Parse parses args for c. It returns the seed brokers and whether to run:
// false after it printed --help or --version to stdout. A refused command
// line is an error wrapping ErrUsage.
func Parse(c Command, args []string, getenv func(string) string, stdout io.Writer) (brokers string, run bool, err error) {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	// Parse reports errors; --help is printed below, to stdout.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	fs.StringVar(&brokers, "brokers", getenv(BrokersEnv), "seed brokers `host:port,...`; empty runs the embedded broker (default $"+BrokersEnv+")")
	version := fs.Bool("version", false, "print the version and exit")
	var check func() error
	if c.Flags != nil {
		check = c.Flags(fs)
	}
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		usage(c, fs, stdout)
		return "", false, nil
	} else if err != nil {
		return "", false, fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() > 0 {
		return "", false, fmt.Errorf("%w: unexpected argument %q", ErrUsage, fs.Arg(0))
	}
	if *version {
		fmt.Fprintln(stdout, buildinfo.String(c.Name))
		return "", false, nil
	}
	if brokers, err = Brokers(brokers); err != nil {
		return "", false, err
	}
	if check != nil {
		if err := check(); err != nil {
			return "", false, err
		}
	}
	return brokers, true, nil
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
