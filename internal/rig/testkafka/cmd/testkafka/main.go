// Command testkafka starts a real Kafka cluster on 127.0.0.1 and runs a
// command against it, or holds it until interrupted.
//
//	testkafka [-nodes 1] [-min-isr 1] [-sasl-ssl] [-- command args...]
//
// With a command, it sets PARSLEY_TEST_BROKERS to the cluster's listeners
// (internal/rig/broker then runs the integration tests against it instead of
// kfake), runs the command, stops the cluster and exits with the
// command's status. Without one, it prints PARSLEY_TEST_BROKERS=... and
// keeps the cluster up until SIGINT or SIGTERM. Either way the brokers are
// killed and their directories removed on the way out.
//
// With -sasl-ssl (or PARSLEY_TESTKAFKA_SASL_SSL=1) every node also serves
// a SASL_SSL listener (mutual TLS, SASL PLAIN, SCRAM and OAUTHBEARER; see
// testkafka.Config.SASLSSL), and PARSLEY_TEST_SECURE names a JSON file
// describing it (testkafka.Secure): its addresses, CA, client certificate
// and key, users and token file. Tests that use it skip without it.
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
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/parsley-go/parsley/internal/rig/testkafka"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("testkafka: ")
	nodes := flag.Int("nodes", 1, "number of broker+controller nodes")
	minISR := flag.Int("min-isr", 1, "broker default min.insync.replicas")
	heap := flag.String("heap", "384m", "each broker JVM's -Xmx")
	startTimeout := flag.Duration("start-timeout", 3*time.Minute, "how long the cluster may take to serve")
	saslSSL := flag.Bool("sasl-ssl", os.Getenv("PARSLEY_TESTKAFKA_SASL_SSL") == "1", "also serve a SASL_SSL listener and describe it in "+testkafka.EnvSecure)
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, testkafka.Config{Nodes: *nodes, MinInsyncReplicas: *minISR, Heap: *heap, SASLSSL: *saslSSL}, *startTimeout, flag.Args()))
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
	env := []string{"PARSLEY_TEST_BROKERS=" + strings.Join(c.Addrs(), ",")}
	if s := c.Secure(); s != nil {
		dir, err := os.MkdirTemp("", "parsley-testkafka-secure-")
		if err != nil {
			log.Print(err)
			return 1
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "secure.json")
		if err := s.WriteFile(path); err != nil {
			log.Print(err)
			return 1
		}
		env = append(env, testkafka.EnvSecure+"="+path)
	}
	log.Printf("%d node(s) serving after %s: %s", cfg.Nodes, time.Since(began).Round(100*time.Millisecond), strings.Join(env, " "))
	if len(args) == 0 {
		for _, e := range env {
			fmt.Println(e)
		}
		<-ctx.Done()
		return 0
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), env...)
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
