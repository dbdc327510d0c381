// Command failover-soak runs the broker-failover soak against a real
// three-broker Kafka cluster it starts (see internal/rig/failover):
// a stamped producer and a settlement stage on three instances run while
// the leader of a source partition, a transaction coordinator and the
// group coordinator are killed and restarted in turn, then (with -rolling)
// every broker is restarted with a controlled shutdown; the oracle then
// checks every settlement. For each fault it prints when the surviving
// brokers showed the new leader or coordinator, when the input and every
// output partition progressed again, and the client's share (the stall
// after the election); it exits 1 on any violation. -clientlog writes the
// franz-go debug logs of the stage's and the producer's clients,
// timestamped, with the soak's own events, for a fault's timeline. It needs
// java and mvn on PATH.
//
//	go run ./internal/rig/failover/cmd/failover-soak [-runs 1] [-warmup 10s] [-rolling] [-session 45s] [-clientlog FILE]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/parsley-go/parsley/internal/rig/failover"
)

func main() {
	runs := flag.Int("runs", 1, "soak runs, each on a fresh cluster")
	warmup := flag.Duration("warmup", 10*time.Second, "steady state before the first fault and after each restart")
	verbose := flag.Bool("v", false, "log the stage instances at debug level to stderr (and to -clientlog)")
	rolling := flag.Bool("rolling", true, "after the kills, restart every broker in turn with a controlled shutdown")
	session := flag.Duration("session", 45*time.Second, "the stage instances' group session timeout")
	clientLog := flag.String("clientlog", "", "write the clients' franz-go debug logs and the soak's events, timestamped, to this file")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	log.SetFlags(log.Ltime | log.Lmicroseconds)
	opts := failover.Options{Warmup: *warmup, Rolling: *rolling, SessionTimeout: *session, Logf: log.Printf}
	stageLog := io.Writer(os.Stderr)
	if *clientLog != "" {
		f, err := os.Create(*clientLog)
		if err != nil {
			log.Fatal(err)
		}
		defer f.Close()
		opts.ClientLog = f
		log.SetOutput(io.MultiWriter(os.Stderr, f))
		stageLog = io.MultiWriter(os.Stderr, f)
	}
	if *verbose {
		opts.StageLog = slog.New(slog.NewTextHandler(stageLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	bad := false
	shares := map[string][]time.Duration{} // fault kind → client share (stall after the kill for a controlled shutdown)
	for run := 1; run <= *runs; run++ {
		rep, err := failover.Run(ctx, opts)
		if err != nil {
			log.Printf("run %d: %v", run, err)
			os.Exit(1)
		}
		fmt.Printf("run %d: %d orders, %d payments, %d aborted IDs, %d settlements, %d violations, %s\n",
			run, rep.Orders, rep.Payments, rep.Aborted, rep.Outputs, len(rep.Violations), rep.Elapsed.Round(time.Second))
		for _, f := range rep.Faults {
			fmt.Printf("run %d: fault %-24s broker %d  elected %6s  all moved %6s  input %6s  stall %6s  client share %6s  per partition %v\n",
				run, f.Kind, f.Broker, ms(f.Elected), ms(f.Moved), ms(f.Input), ms(f.Stall), ms(f.ClientShare()), msAll(f.Output))
			if f.Kind == "controlled shutdown" {
				shares[f.Kind] = append(shares[f.Kind], f.Stall)
			} else {
				shares[f.Kind] = append(shares[f.Kind], f.ClientShare())
			}
		}
		for i, v := range rep.Violations {
			if i == 20 {
				fmt.Printf("... %d more\n", len(rep.Violations)-i)
				break
			}
			fmt.Printf("violation: %s\n", v)
		}
		if want := 3 + 3*btoi(*rolling); len(rep.Faults) != want {
			log.Printf("run %d: %d faults injected, want %d", run, len(rep.Faults), want)
			bad = true
		}
		if len(rep.Violations) > 0 {
			bad = true
		}
	}
	for _, kind := range []string{"partition leader", "transaction coordinator", "group coordinator", "controlled shutdown"} {
		ds := shares[kind]
		if len(ds) == 0 {
			continue
		}
		what := "output after election"
		if kind == "controlled shutdown" {
			what = "output after SIGTERM"
		}
		fmt.Printf("%-24s %s over %d faults: p50 %s, p99 %s, max %s\n", kind, what, len(ds), ms(pct(ds, 50)), ms(pct(ds, 99)), ms(pct(ds, 100)))
	}
	if bad {
		os.Exit(1)
	}
}

func ms(d time.Duration) time.Duration { return d.Round(time.Millisecond) }

func msAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = ms(d)
	}
	return out
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pct is the nearest-rank percentile p of ds: with fewer than 100
// samples, p99 is the maximum.
func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := (p*len(s) + 99) / 100
	return s[max(i, 1)-1]
}
