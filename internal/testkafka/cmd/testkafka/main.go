// Command testkafka starts a real Kafka cluster on 127.0.0.1 and runs a
// command against it, or holds it until interrupted.
//
//	testkafka [-nodes 1] [-min-isr 1] [-- command args...]
//
// With a command, it sets PARSLEY_TEST_BROKERS to the cluster's listeners
// (internal/broker then runs the integration tests against it instead of
// kfake), runs the command, stops the cluster and exits with the
// command's status. Without one, it prints PARSLEY_TEST_BROKERS=... and
// keeps the cluster up until SIGINT or SIGTERM. Either way the brokers are
// killed and their directories removed on the way out.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/parsley-go/parsley/internal/testkafka"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("testkafka: ")
	nodes := flag.Int("nodes", 1, "number of broker+controller nodes")
	minISR := flag.Int("min-isr", 1, "broker default min.insync.replicas")
	heap := flag.String("heap", "384m", "each broker JVM's -Xmx")
	startTimeout := flag.Duration("start-timeout", 3*time.Minute, "how long the cluster may take to serve")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, testkafka.Config{Nodes: *nodes, MinInsyncReplicas: *minISR, Heap: *heap}, *startTimeout, flag.Args()))
}

func run(ctx context.Context, cfg testkafka.Config, startTimeout time.Duration, args []string) int {
	began := time.Now()
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	c, err := testkafka.Start(sctx, cfg)
	cancel()
	if err != nil {
		log.Print(err)
		return 1
	}
	defer func() {
		if err := c.Close(); err != nil {
			log.Print(err)
		}
	}()
	env := "PARSLEY_TEST_BROKERS=" + strings.Join(c.Addrs(), ",")
	log.Printf("%d node(s) serving after %s: %s", cfg.Nodes, time.Since(began).Round(100*time.Millisecond), env)
	if len(args) == 0 {
		fmt.Println(env)
		<-ctx.Done()
		return 0
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), env)
	// On SIGINT, let the child (go test) stop its tests first.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 30 * time.Second
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &exit):
		return exit.ExitCode()
	default:
		log.Print(err)
		return 1
	}
}
