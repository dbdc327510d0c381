// Command nats-bridge forwards a small causal history from Kafka to NATS
// JetStream with the Parsley bridge, and prints the stream.
//
// Orders are written to the "orders" topic inside transactions that stay
// open for a moment; a payment for each order, stamped as caused by it,
// is written to "payments" at once, so the bridge sees each payment before
// its order is visible. The stream still holds every order before its
// payment.
//
// By default it runs on embedded brokers: an in-process Kafka (kfake) and
// an in-process NATS server with JetStream on loopback. Pass --brokers
// and --nats to use real ones (the topics and the stream are created if
// missing).
//
//	go run ./examples/nats-bridge
//	go run ./examples/nats-bridge --brokers localhost:9092 --nats nats://localhost:4222
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/parsley-go/parsley/bridge"
	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/examples/internal/excli"
	"github.com/parsley-go/parsley/examples/internal/excluster"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	os.Exit(excli.Main(command(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// The bridge's group and the JetStream stream, under the run prefix.
const (
	groupName  = "nats-bridge-example"
	streamName = "ORDERS"
)

// options are the example's own flags.
type options struct {
	nats     string // NATS URL; empty starts an embedded server
	orders   int
	stateDir string // empty: a temporary directory, removed at the end
}

func command() excli.Command {
	var o options
	return excli.Command{
		Name:    "nats-bridge",
		Summary: "Forwards a small causal history from Kafka to NATS JetStream with the Parsley bridge, and\nprints the stream: every payment after its order.",
		Flags: func(fs *flag.FlagSet) func() error {
			fs.StringVar(&o.nats, "nats", "", "NATS URL (default: an embedded server with JetStream)")
			fs.IntVar(&o.orders, "orders", 5, "orders to write, each with one payment (1 to 1000)")
			fs.StringVar(&o.stateDir, "state", "", "state directory (default: a temporary one, removed at the end)")
			return func() error {
				if o.nats != "" && !strings.HasPrefix(o.nats, "nats://") && !strings.HasPrefix(o.nats, "tls://") {
					return fmt.Errorf("%w: invalid --nats %q: want nats://host:port or tls://host:port", excli.ErrUsage, o.nats)
				}
				return excli.IntRange("orders", o.orders, 1, 1000)
			}
		},
		Run: func(ctx context.Context, out io.Writer, t excli.Target) error { return run(ctx, out, t, o) },
	}
}

func run(ctx context.Context, out io.Writer, t excli.Target, o options) error {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	group, orders, payments := t.Name(groupName), t.Name("orders"), t.Name("payments")
	// NATS names take no '.' in a stream and no empty subject token.
	natsPrefix := strings.ReplaceAll(t.Prefix, ".", "_")
	stream, subjects := natsPrefix+streamName, natsPrefix+"shop"
	kafka, err := excluster.Open(ctx, out, t,
		excluster.Topic{Name: orders, Partitions: 1},
		excluster.Topic{Name: payments, Partitions: 1},
		excluster.Topic{Name: bridge.ChangelogTopic(group, "bridge"), Partitions: 1, Compact: true},
	)
	if err != nil {
		return err
	}
	defer kafka.Close()
	seeds, admin := kafka.Addrs, kafka.Admin
	if kafka.Embedded {
		fmt.Fprintln(out, "kafka: embedded at", strings.Join(seeds, ","))
	}
	natsURL := o.nats
	if natsURL == "" {
		// The server's JetStream files live in a directory of our own,
		// removed once the server is down: nothing is left behind.
		jsDir, err := os.MkdirTemp("", "nats-bridge-js-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(jsDir)
		s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: jsDir, NoLog: true, NoSigs: true})
		if err != nil {
			return err
		}
		go s.Start()
		defer s.Shutdown() // runs before the RemoveAll above
		if !s.ReadyForConnections(10 * time.Second) {
			return errors.New("embedded nats-server not ready")
		}
		natsURL = fmt.Sprintf("nats://127.0.0.1:%d", s.Addr().(*net.TCPAddr).Port)
		fmt.Fprintln(out, "nats: embedded at", natsURL)
	} else {
		fmt.Fprintln(out, "nats: connecting to", natsURL)
	}
	stateDir := o.stateDir
	if stateDir == "" {
		if stateDir, err = os.MkdirTemp("", "nats-bridge-state-"); err != nil {
			return err
		}
		defer os.RemoveAll(stateDir)
	}

	nc, err := nats.Connect(natsURL, nats.Timeout(excluster.ConnectTimeout))
	if err != nil {
		return fmt.Errorf("connect to NATS at %s: %w", natsURL, err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subjects + ".>"}, Duplicates: 2 * time.Minute, AllowAtomicPublish: true}); err != nil {
		return fmt.Errorf("create stream: %w", err)
	}
	if o.nats != "" && t.Prefix != "" && !t.Chosen {
		// Like the topics of a generated prefix, its stream goes with it.
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), excluster.ConnectTimeout)
			defer cancel()
			if err := js.DeleteStream(dctx, stream); err != nil {
				fmt.Fprintf(out, "could not delete stream %s: %v\n", stream, err)
			}
		}()
	}

	subject, err := bridge.Template(subjects + ".{topic}.{key}")
	if err != nil {
		return err
	}
	b, err := bridge.New(bridge.Config{
		Brokers: seeds, ApplicationID: group, InstanceID: "example-1", StateDir: stateDir,
		Topics:       []string{orders, payments},
		SinkConfig:   bridge.SinkConfig{Subject: subject, NATSURL: natsURL, Stream: stream, Logger: log},
		PollInterval: 50 * time.Millisecond, SessionTimeout: 6 * time.Second, TransactionTimeout: 10 * time.Second,
		LeaveOnShutdown: true, // this instance never comes back: its group can go
	})
	if err != nil {
		return err
	}
	bctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(bctx) }()
	defer func() { stop(); <-done }()

	if err := writeHistory(ctx, seeds, admin, group, orders, payments, o.orders); err != nil {
		return err
	}
	want := 2 * o.orders
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return err
	}
	for {
		info, err := st.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs >= uint64(want) {
			break
		}
		select {
		case err := <-done:
			return fmt.Errorf("bridge stopped: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("stream has %d of %d messages: %w", info.State.Msgs, want, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	fmt.Fprintf(out, "stream %s, in stream order:\n", stream)
	info, err := st.Info(ctx)
	if err != nil {
		return err
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  %3d  %-26s %-14s %s\n", seq, m.Subject, m.Header.Get(bridge.HeaderCoordinate), m.Data)
	}
	fmt.Fprintf(out, "forwarded %d records; every payment follows its order\n", want)
	return nil
}

// writeHistory writes each order in a transaction that stays open while
// its payment, stamped as caused by the order, is written and visible.
func writeHistory(ctx context.Context, seeds []string, admin *kadm.Client, group, orders, payments string, n int) error {
	tx, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID(group+"-writer"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer tx.Close()
	plain, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer plain.Close()
	clk := clock.New(admin)
	for i := range n {
		key := fmt.Sprintf("o%d", i)
		if err := tx.BeginTransaction(); err != nil {
			return err
		}
		order := &kgo.Record{Topic: orders, Key: []byte(key), Value: fmt.Appendf(nil, "order %s", key)}
		if err := tx.ProduceSync(ctx, order).FirstErr(); err != nil {
			return err
		}
		if err := clk.RecordProduced(order); err != nil {
			return err
		}
		pay := &kgo.Record{Topic: payments, Key: []byte(key), Value: fmt.Appendf(nil, "payment for %s", key)}
		if err := clk.Stamp(ctx, pay); err != nil {
			return err
		}
		if err := plain.ProduceSync(ctx, pay).FirstErr(); err != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond) // the payment is visible, its order not yet
		if err := tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
			return err
		}
	}
	return nil
}
