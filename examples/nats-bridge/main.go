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
	"github.com/parsley-go/parsley/internal/broker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "nats-bridge:", err)
		os.Exit(1)
	}
}

const (
	group  = "nats-bridge-example"
	stream = "ORDERS"
)

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("nats-bridge", flag.ContinueOnError)
	brokers := fs.String("brokers", "", "Kafka seed brokers, comma-separated (default: an embedded cluster)")
	natsURL := fs.String("nats", "", "NATS URL (default: an embedded server with JetStream)")
	orders := fs.Int("orders", 5, "orders to write (each gets one payment)")
	stateDir := fs.String("state", "", "state directory (default: a temporary one)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))

	var seeds []string
	if *brokers == "" {
		c, err := broker.Start(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		seeds = c.Addrs()
		fmt.Fprintln(out, "kafka: embedded at", strings.Join(seeds, ","))
	} else {
		seeds = strings.Split(*brokers, ",")
	}
	if *natsURL == "" {
		s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: must(os.MkdirTemp("", "nats-bridge-js")), NoLog: true, NoSigs: true})
		if err != nil {
			return err
		}
		go s.Start()
		if !s.ReadyForConnections(10 * time.Second) {
			return errors.New("embedded nats-server not ready")
		}
		defer func() { s.Shutdown(); os.RemoveAll(s.StoreDir()) }()
		*natsURL = fmt.Sprintf("nats://127.0.0.1:%d", s.Addr().(*net.TCPAddr).Port)
		fmt.Fprintln(out, "nats: embedded at", *natsURL)
	}
	if *stateDir == "" {
		*stateDir = must(os.MkdirTemp("", "nats-bridge-state"))
		defer os.RemoveAll(*stateDir)
	}

	kc, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return err
	}
	defer kc.Close()
	admin := kadm.NewClient(kc)
	if err := createTopics(ctx, admin); err != nil {
		return err
	}
	nc, err := nats.Connect(*natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{"shop.>"}, Duplicates: 2 * time.Minute, AllowAtomicPublish: true}); err != nil {
		return fmt.Errorf("create stream: %w", err)
	}

	subject, err := bridge.Template("shop.{topic}.{key}")
	if err != nil {
		return err
	}
	b, err := bridge.New(bridge.Config{
		Brokers: seeds, Group: group, InstanceID: "example-1", StateDir: *stateDir,
		Topics: []string{"orders", "payments"}, Subject: subject,
		NATSURL: *natsURL, Stream: stream,
		PollInterval: 50 * time.Millisecond, SessionTimeout: 6 * time.Second, TransactionTimeout: 10 * time.Second,
		Logger: log,
	})
	if err != nil {
		return err
	}
	bctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(bctx) }()
	defer func() { stop(); <-done }()

	if err := writeHistory(ctx, seeds, admin, *orders); err != nil {
		return err
	}
	want := 2 * *orders
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

func createTopics(ctx context.Context, admin *kadm.Client) error {
	compact := "compact"
	for _, t := range []struct {
		name string
		cfg  map[string]*string
	}{{"orders", nil}, {"payments", nil}, {bridge.ChangelogTopic(group, "bridge"), map[string]*string{"cleanup.policy": &compact}}} {
		r, err := admin.CreateTopic(ctx, 1, -1, t.cfg, t.name)
		if err == nil {
			err = r.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", t.name, err)
		}
	}
	return nil
}

// writeHistory writes each order in a transaction that stays open while
// its payment, stamped as caused by the order, is written and visible.
func writeHistory(ctx context.Context, seeds []string, admin *kadm.Client, n int) error {
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
		order := &kgo.Record{Topic: "orders", Key: []byte(key), Value: fmt.Appendf(nil, "order %s", key)}
		if err := tx.ProduceSync(ctx, order).FirstErr(); err != nil {
			return err
		}
		if err := clk.RecordProduced(order); err != nil {
			return err
		}
		pay := &kgo.Record{Topic: "payments", Key: []byte(key), Value: fmt.Appendf(nil, "payment for %s", key)}
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

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
