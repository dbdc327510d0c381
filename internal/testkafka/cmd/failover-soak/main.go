// Command failover-soak runs the broker-failover soak against a real
// three-broker Kafka cluster it starts (see internal/testkafka/failover):
// a stamped producer and a settlement stage on three instances run while
// the leader of a source partition, a transaction coordinator and the
// group coordinator are killed and restarted in turn; the oracle then
// checks every settlement. It prints each fault's stall and exits 1 on any
// violation. It needs java and mvn on PATH.
//
//	go run ./internal/testkafka/cmd/failover-soak [-runs 1] [-warmup 10s]
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/parsley-go/parsley/internal/testkafka/failover"
)

func main() {
	log.SetFlags(log.Ltime)
	runs := flag.Int("runs", 1, "soak runs, each on a fresh cluster")
	warmup := flag.Duration("warmup", 10*time.Second, "steady state before the first fault and after each restart")
	verbose := flag.Bool("v", false, "log the stage instances at debug level to stderr")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	opts := failover.Options{Warmup: *warmup, Logf: log.Printf}
	if *verbose {
		opts.StageLog = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	bad := false
	for run := 1; run <= *runs; run++ {
		rep, err := failover.Run(ctx, opts)
		if err != nil {
			log.Printf("run %d: %v", run, err)
			os.Exit(1)
		}
		fmt.Printf("run %d: %d orders, %d payments, %d aborted IDs, %d settlements, %d violations, %s\n",
			run, rep.Orders, rep.Payments, rep.Aborted, rep.Outputs, len(rep.Violations), rep.Elapsed.Round(time.Second))
		for _, f := range rep.Faults {
			fmt.Printf("run %d: fault %-24s broker %d  stall %s\n", run, f.Kind, f.Broker, f.Stall.Round(10*time.Millisecond))
		}
		for i, v := range rep.Violations {
			if i == 20 {
				fmt.Printf("... %d more\n", len(rep.Violations)-i)
				break
			}
			fmt.Printf("violation: %s\n", v)
		}
		if len(rep.Faults) != 3 {
			log.Printf("run %d: %d faults injected, want 3", run, len(rep.Faults))
			bad = true
		}
		if len(rep.Violations) > 0 {
			bad = true
		}
	}
	if bad {
		os.Exit(1)
	}
}
