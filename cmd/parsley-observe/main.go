// Command parsley-observe tails Kafka topics, rebuilds the causal graph
// from Parsley stamps, and reports what will make consumers hold or wedge.
//
//	parsley-observe serve   --brokers HOST:PORT --pattern '.*'     web UI, JSON API, /metrics, /livez, /readyz
//	parsley-observe scan    --brokers HOST:PORT --topics a,b       one pass; exit 1 on findings (for CI)
//	parsley-observe explain --db observer.db orders/0@42           ancestry as a tree
//	parsley-observe graph   --db observer.db --format dot orders/0@42
//	parsley-observe decode  0100000001...                          a stamp value, hex or base64
//	parsley-observe ack     --url http://HOST:8080 --token-file F --reason WHY ID   acknowledge a finding
//	parsley-observe demo                                           embedded broker, faulty topology, UI
//
// Every flag has a PARSLEY_<FLAG> environment variable (brokers:
// PARSLEY_BROKERS, db: PARSLEY_OBSERVER_DB) and can come from a YAML or TOML
// --config file; the commands that talk to Kafka take TLS and SASL flags
// (flags.go shapes them all). Exit status: 0 success (and, for scan, no open
// finding at or above --fail-on), 1 findings, 2 error.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := app().RunContext(ctx, os.Args)
	stop()
	var ec cli.ExitCoder
	switch {
	case err == nil:
	case errors.As(err, &ec):
		if msg := ec.Error(); msg != "" {
			fmt.Fprintln(os.Stderr, "parsley-observe:", msg)
		}
		os.Exit(ec.ExitCode())
	default:
		fmt.Fprintln(os.Stderr, "parsley-observe:", err)
		os.Exit(2)
	}
}
