// Command quickstart runs a small causal pipeline end to end on the embedded
// Kafka broker (or a real cluster with --brokers) and prints what happened.
//
// An order service writes each order in a transaction and, once it
// committed, the order's payment from a plain franz-go producer, stamped as
// caused by it (package clock). Before the first order, a second order
// writer opens a transaction on every orders partition and holds it a
// moment: read_committed consumers see no order past it until it ends, so
// the first payment reaches the pipeline before its order. Two stages
// follow:
//
//	orders ─┐
//	        ├─► settlement (stateful fold) ─► settlements ─► notify ─► notifications
//	payments┘
//
// The settlement stage holds the early payment until its order is
// delivered, so no payment is ever settled before its order. Finally the
// observer scans every topic's stamps and prints its findings.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/examples/internal/excli"
	"github.com/parsley-go/parsley/examples/internal/excluster"
	"github.com/parsley-go/parsley/observer"
	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kgo"
)

// appName is the application ID under the run prefix.
const appName = "quickstart"

func main() {
	os.Exit(excli.Main(command(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func command() excli.Command {
	var orders int
	return excli.Command{
		Name:    "quickstart",
		Summary: "Runs a stamped producer, a two-stage exactly-once pipeline and an observer scan, and prints\nthe early payment held until its order commits.",
		Flags: func(fs *flag.FlagSet) func() error {
			fs.IntVar(&orders, "orders", 5, "how many orders to place (1 to 1000)")
			return func() error { return excli.IntRange("orders", orders, 1, 1000) }
		},
		Run: func(ctx context.Context, out io.Writer, t excli.Target) error { return run(ctx, out, t, orders) },
	}
}

type account struct {
	Ordered bool
	Paid    bool
}

func run(ctx context.Context, out io.Writer, t excli.Target, n int) error {
	app := t.Name(appName)
	ordersT := stage.NewTopic(t.Name("orders"), stage.String(), stage.String())
	paymentsT := stage.NewTopic(t.Name("payments"), stage.String(), stage.String())
	settlementsT := stage.NewTopic(t.Name("settlements"), stage.String(), stage.String())
	notificationsT := stage.NewTopic(t.Name("notifications"), stage.String(), stage.String())

	// settlement folds orders and payments per order ID. A payment
	// delivered before its order would settle as "EARLY".
	b := stage.WithState(stage.Named("settlement"), stage.JSON[account](), account{})
	stage.OnFold(b, ordersT, func(s account, m stage.Message[string, string]) (stage.Step[account], error) {
		s.Ordered = true
		return stage.Next(s, settlementsT.Send(m.Key, "order "+m.Value+" received")), nil
	})
	stage.OnFold(b, paymentsT, func(s account, m stage.Message[string, string]) (stage.Step[account], error) {
		if !s.Ordered {
			return stage.Next(s, settlementsT.Send(m.Key, "EARLY payment "+m.Value)), nil
		}
		s.Paid = true
		return stage.Next(s, settlementsT.Send(m.Key, "payment "+m.Value+" settled")), nil
	})
	settlement := b.Into(settlementsT).MustBuild()

	notify := stage.On(stage.Named("notify"), settlementsT, func(m stage.Message[string, string]) ([]stage.Emission, error) {
		return []stage.Emission{notificationsT.Send(m.Key, "tell customer of "+m.Key+": "+m.Value)}, nil
	}).Into(notificationsT).MustBuild()

	const parts = 2
	cl, err := excluster.Open(ctx, out, t,
		excluster.Topic{Name: ordersT.Name(), Partitions: parts},
		excluster.Topic{Name: paymentsT.Name(), Partitions: parts},
		excluster.Topic{Name: settlementsT.Name(), Partitions: parts},
		excluster.Topic{Name: notificationsT.Name(), Partitions: parts},
		excluster.Topic{Name: stage.ChangelogTopic(app, "settlement"), Partitions: parts, Compact: true},
		excluster.Topic{Name: stage.ChangelogTopic(app, "notify"), Partitions: parts, Compact: true},
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	where := "the embedded broker"
	if !cl.Embedded {
		where = strings.Join(cl.Addrs, ",")
	}
	fmt.Fprintf(out, "running on %s\n", where)

	dir, err := os.MkdirTemp("", "parsley-quickstart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	a, err := stage.New(stage.Config{
		ApplicationID:      app,
		InstanceID:         "instance-1",
		Brokers:            cl.Addrs,
		StateDir:           filepath.Join(dir, "state"),
		PollInterval:       50 * time.Millisecond,
		SessionTimeout:     6 * time.Second,
		RebalanceTimeout:   6 * time.Second,
		LeaveOnShutdown:    true, // this instance never comes back: its group can go
		TransactionTimeout: 10 * time.Second,
		Logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, settlement, notify)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(runCtx) }()
	defer func() { stop(); <-runErr }()

	if err := produce(ctx, out, cl, a, app, ordersT.Name(), paymentsT.Name(), n); err != nil {
		return err
	}

	// Every order yields two settlements and two notifications.
	got, err := readCommitted(ctx, cl, notificationsT.Name(), 2*n)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "notifications, in delivered order per order ID:")
	early := 0
	for _, r := range got {
		fmt.Fprintf(out, "  %s\n", r.Value)
		if strings.Contains(string(r.Value), "EARLY") {
			early++
		}
	}
	if early > 0 {
		return fmt.Errorf("%d payments were settled before their order", early)
	}
	fmt.Fprintf(out, "causal order held: all %d payments were delivered after their orders\n", n)

	return scan(ctx, out, cl, dir, ordersT.Name(), paymentsT.Name(), settlementsT.Name(), notificationsT.Name())
}

// produce places n orders, each in a transaction of its own
// (clock.BeginTransaction), and each order's payment from a plain producer
// once the order committed: stamped through the shared clock, the payment
// claims its order. (Sent while the order's transaction was open, it would
// be refused with a *clock.OpenTxnError: it could not claim the order yet.)
//
// Before the first order, another writer opens a transaction on every
// orders partition, as a second instance of the order service would, and
// holds it until the settlement stage holds the first payment: a
// read_committed consumer reads no further than the first offset of an open
// transaction (Kafka's last stable offset), so the committed first order is
// invisible while its payment is not. Then that writer aborts.
func produce(ctx context.Context, out io.Writer, cl *excluster.Cluster, a *stage.App, app, orders, payments string, n int) error {
	txn, err := cl.NewClient(kgo.TransactionalID(app + "-order-writer"))
	if err != nil {
		return err
	}
	defer txn.Close()
	plain, err := cl.NewClient()
	if err != nil {
		return err
	}
	defer plain.Close()
	clk := clock.New(cl.Admin)

	other, err := holdOrders(ctx, cl, app, orders)
	if err != nil {
		return err
	}
	defer other.Close()

	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("o-%d", i)
		tx, err := clock.BeginTransaction(clk, txn)
		if err != nil {
			return err
		}
		order := &kgo.Record{Topic: orders, Key: []byte(id), Value: []byte(fmt.Sprintf("#%d", i))}
		if err := tx.ProduceSync(ctx, order); err != nil {
			return errors.Join(err, tx.Abort(ctx))
		}
		if err := tx.Commit(ctx); err != nil {
			return errors.Join(err, tx.Abort(ctx))
		}
		pay := &kgo.Record{Topic: payments, Key: []byte(id), Value: []byte(fmt.Sprintf("$%d", 10*i))}
		if err := clk.Stamp(ctx, pay); err != nil {
			return err
		}
		if err := plain.ProduceSync(ctx, pay).FirstErr(); err != nil {
			return err
		}
		if err := clk.RecordProduced(pay); err != nil {
			return err
		}
		if i == 1 {
			fmt.Fprintf(out, "producer: order %s committed at %s/%d@%d behind another writer's open transaction; its payment, claiming it, is already visible\n", id, orders, order.Partition, order.Offset)
			if err := waitForHold(ctx, out, a, payments); err != nil {
				return err
			}
			if err := other.EndTransaction(ctx, kgo.TryAbort); err != nil {
				return err
			}
			fmt.Fprintln(out, "producer: the other writer aborted; the order is visible")
		}
	}
	fmt.Fprintf(out, "producer: placed %d orders and %d payments\n", n, n)
	return nil
}

// holdOrders opens a transaction with a record on every partition of orders
// and leaves it open.
func holdOrders(ctx context.Context, cl *excluster.Cluster, app, orders string) (*kgo.Client, error) {
	other, err := cl.NewClient(kgo.TransactionalID(app+"-other-order-writer"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return nil, err
	}
	parts, err := cl.Admin.ListTopics(ctx, orders)
	if err == nil {
		err = parts.Error()
	}
	if err == nil {
		err = other.BeginTransaction()
	}
	for _, p := range parts[orders].Partitions.Numbers() {
		if err != nil {
			break
		}
		err = other.ProduceSync(ctx, &kgo.Record{Topic: orders, Partition: p, Key: []byte("cancelled"), Value: []byte("cancelled")}).FirstErr()
	}
	if err != nil {
		other.Close()
		return nil, err
	}
	return other, nil
}

// waitForHold polls the application's hold diagnosis until the settlement
// stage reports the early payment held, and prints why it is held.
func waitForHold(ctx context.Context, out io.Writer, a *stage.App, payments string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, h := range a.ExplainHolds() {
			if h.Stage == "settlement" && h.Topic == payments {
				fmt.Fprintf(out, "settlement/%d holds %s/%d@%d: %s\n", h.Partition, h.Topic, h.Coordinate.Partition, h.Offset, h.Diagnosis)
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return errors.New("the settlement stage never held the early payment")
}

// readCommitted reads want records of topic as a read_committed consumer,
// ordered by partition then offset.
func readCommitted(ctx context.Context, cl *excluster.Cluster, topic string, want int) ([]*kgo.Record, error) {
	c, err := cl.NewClient(kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	byPart := map[int32][]*kgo.Record{}
	got := 0
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for got < want {
		fs := c.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %d of %d records: %w", topic, got, want, err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			byPart[r.Partition] = append(byPart[r.Partition], r)
			got++
		})
	}
	var all []*kgo.Record
	for p := int32(0); len(all) < got; p++ {
		all = append(all, byPart[p]...)
	}
	return all, nil
}

// scan runs the observer once over every topic and prints its findings.
func scan(ctx context.Context, out io.Writer, cl *excluster.Cluster, dir string, topics ...string) error {
	st, err := observer.OpenStore(ctx, filepath.Join(dir, "observer.db"))
	if err != nil {
		return err
	}
	defer st.Close()
	o, err := observer.New(observer.Config{Brokers: cl.Addrs, Topics: topics,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, st)
	if err != nil {
		return err
	}
	defer o.Close()
	if err := o.Scan(ctx); err != nil {
		return err
	}
	fs, err := o.Findings(ctx)
	if err != nil {
		return err
	}
	var problems, notes []observer.Finding
	for _, f := range fs {
		if f.Severity >= observer.SeverityWarning {
			problems = append(problems, f)
		} else {
			notes = append(notes, f)
		}
	}
	fmt.Fprintf(out, "observer: %d problems, %d notes\n", len(problems), len(notes))
	for _, f := range problems {
		fmt.Fprintf(out, "  %s\n", f)
	}
	for _, f := range notes {
		fmt.Fprintf(out, "  note: %s: %s claims %s\n", f.Code, f.Names[0], f.Names[len(f.Names)-1])
	}
	if len(problems) > 0 {
		return fmt.Errorf("the observer found %d problems", len(problems))
	}
	return nil
}
