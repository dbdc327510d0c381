// Command netsoak runs the network-fault soak (package
// internal/rig/netsoak): a causal pipeline on the embedded broker with a
// fault-injecting proxy on every link, judged by an oracle that reads only
// the outputs and the producer's ground truth.
//
//	go run ./internal/rig/netsoak/cmd/netsoak                      # one 5-minute run, random seed
//	go run ./internal/rig/netsoak/cmd/netsoak -seed 7 -runs 3      # replay seed 7, then 8 and 9
//	go run ./internal/rig/netsoak/cmd/netsoak -duration 1m -v      # shorter, with component logs
//
// It prints one summary line per run and exits 1 if any run had a
// violation, missed a fault kind, or left a zombie unfenced.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/parsley-go/parsley/internal/rig/netsoak"
	"github.com/rs/zerolog"
)

func main() {
	seed := flag.Uint64("seed", uint64(time.Now().UnixNano()%1_000_000), "seed of the first run (printed; pass it to replay)")
	runs := flag.Int("runs", 1, "runs, with seeds seed, seed+1, ...")
	duration := flag.Duration("duration", 5*time.Minute, "how long each run produces under faults")
	verbose := flag.Bool("v", false, "print the components' warnings and errors")
	flag.Parse()
	// Toxiproxy's toxics log through zerolog's global logger at trace
	// level; a soak's output is its own progress lines.
	zerolog.SetGlobalLevel(zerolog.WarnLevel)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	log := slog.New(slog.DiscardHandler)
	if *verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	failed := false
	for i := range *runs {
		s := *seed + uint64(i)
		fmt.Printf("run %d/%d: seed %d, %s under faults\n", i+1, *runs, s, *duration)
		rep, err := netsoak.Run(ctx, netsoak.Options{Seed: s, Duration: *duration, Out: os.Stdout, Log: log})
		if err != nil {
			fmt.Fprintf(os.Stderr, "netsoak: seed %d: %v\n", s, err)
			os.Exit(2)
		}
		for _, v := range rep.Verdict.Violations {
			fmt.Println("  violation:", v)
		}
		fmt.Println(rep.Summary())
		if !rep.OK() {
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}
