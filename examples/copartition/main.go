// Command copartition shows why every producer feeding a stage must
// partition with murmur2, and how Parsley says so when one does not.
//
// Orders are written by a franz-go producer (murmur2, Kafka's default). For
// each order a second producer writes a payment, stamped with the order as
// its cause. A settlement stage folds orders and payments per order ID.
// With --partitioner murmur2 each payment lands on its order's partition
// number and the stage settles every payment after its order. With
// --partitioner fnv (sarama's default hash) most payments land elsewhere:
// the stage task for that partition never sees the order — another task
// consumes it — so the payment settles without it. The stamps were right;
// the placement was not. The stage logs one WARN per topic pair and counts
// every such delivery (parsley_cross_task_claims_total), and the observer
// reports the cross-partition-cause finding. The default is fnv: the
// broken case, which the run says before it starts.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/examples/internal/excli"
	"github.com/parsley-go/parsley/examples/internal/excluster"
	"github.com/parsley-go/parsley/observer"
	"github.com/parsley-go/parsley/stage"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// appName is the application ID under the run prefix.
const appName = "copartition"

func main() {
	os.Exit(excli.Main(command(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func command() excli.Command {
	var partitioner string
	var orders int
	return excli.Command{
		Name: "copartition",
		Summary: "Shows why every producer feeding a stage must partition with murmur2. By default the payment\n" +
			"producer uses fnv (sarama's default hash): the intended broken case, where payments settle\n" +
			"without their orders and the stage and the observer say so. --partitioner murmur2 is the fix.",
		Flags: func(fs *flag.FlagSet) func() error {
			fs.StringVar(&partitioner, "partitioner", "fnv", "the payment producer's partitioner: murmur2 or fnv")
			fs.IntVar(&orders, "orders", 12, "how many orders to place (1 to 1000)")
			return func() error {
				if _, ok := partitioners[partitioner]; !ok {
					return fmt.Errorf("%w: invalid --partitioner %q: want murmur2 or fnv", excli.ErrUsage, partitioner)
				}
				return excli.IntRange("orders", orders, 1, 1000)
			}
		},
		Run: func(ctx context.Context, out io.Writer, t excli.Target) error {
			return run(ctx, out, t, partitioner, orders)
		},
	}
}

// partitioners are the payment producer's choices: Kafka's default, and
// sarama's default (FNV-1a of the key) as franz-go spells it.
var partitioners = map[string]func() kgo.Partitioner{
	"murmur2": func() kgo.Partitioner { return kgo.StickyKeyPartitioner(nil) },
	"fnv": func() kgo.Partitioner {
		return kgo.StickyKeyPartitioner(kgo.SaramaHasher(func(b []byte) uint32 {
			h := fnv.New32a()
			h.Write(b)
			return h.Sum32()
		}))
	},
}

type account struct{ Ordered bool }

func run(ctx context.Context, out io.Writer, t excli.Target, partitioner string, n int) error {
	newPartitioner, ok := partitioners[partitioner]
	if !ok {
		return fmt.Errorf("unknown partitioner %q: want murmur2 or fnv", partitioner)
	}
	if partitioner == "murmur2" {
		fmt.Fprintln(out, "payments partitioned with murmur2, like their orders: the correct case, expect no warnings and no findings")
	} else {
		fmt.Fprintf(out, "payments partitioned with %s, orders with murmur2: the intended broken case, expect WARN lines, a metric and findings\n(--partitioner murmur2 shows the fix)\n", partitioner)
	}
	app := t.Name(appName)
	ordersT := stage.NewTopic(t.Name("orders"), stage.String(), stage.String())
	paymentsT := stage.NewTopic(t.Name("payments"), stage.String(), stage.String())
	settlementsT := stage.NewTopic(t.Name("settlements"), stage.String(), stage.String())
	b := stage.WithState(stage.Named("settlement"), stage.JSON[account](), account{})
	stage.OnFold(b, ordersT, func(a account, m stage.Message[string, string]) (stage.Step[account], error) {
		a.Ordered = true
		return stage.Next(a, settlementsT.Send(m.Key, "order")), nil
	})
	stage.OnFold(b, paymentsT, func(a account, m stage.Message[string, string]) (stage.Step[account], error) {
		if !a.Ordered {
			return stage.Next(a, settlementsT.Send(m.Key, "payment WITHOUT its order")), nil
		}
		return stage.Next(a, settlementsT.Send(m.Key, "payment")), nil
	})
	settlement := b.Into(settlementsT).MustBuild()

	const parts = 4
	cl, err := excluster.Open(ctx, out, t,
		excluster.Topic{Name: ordersT.Name(), Partitions: parts},
		excluster.Topic{Name: paymentsT.Name(), Partitions: parts},
		excluster.Topic{Name: settlementsT.Name(), Partitions: parts},
		excluster.Topic{Name: stage.ChangelogTopic(app, "settlement"), Partitions: parts, Compact: true},
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	dir, err := os.MkdirTemp("", "parsley-copartition-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	warnings := new(lockedBuffer)
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
		Logger:             slog.New(slog.NewTextHandler(warnings, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, settlement)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(a.Collector())
	runCtx, stop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- a.Run(runCtx) }()
	defer func() { stop(); <-runErr }()

	misplaced, err := produce(ctx, cl, newPartitioner(), ordersT.Name(), paymentsT.Name(), n)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "payment producer partitions with %s: %d of %d payments landed on another partition than their order\n", partitioner, misplaced, n)

	settled, err := readAll(ctx, cl, settlementsT.Name(), 2*n)
	if err != nil {
		return err
	}
	without := 0
	for _, r := range settled {
		if strings.Contains(string(r.Value), "WITHOUT") {
			without++
		}
	}
	fmt.Fprintf(out, "settlement stage: %d payments settled without their order\n", without)
	for l := range strings.Lines(warnings.String()) {
		if strings.Contains(l, "another task consumes") {
			fmt.Fprintf(out, "stage log: %s", l)
		}
	}
	fams, err := reg.Gather()
	if err != nil {
		return err
	}
	for _, f := range fams {
		if f.GetName() != "parsley_cross_task_claims_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			fmt.Fprintf(out, "metric: %s{%s} %v\n", f.GetName(), strings.Join(ls, ","), m.GetCounter().GetValue())
		}
	}
	return scan(ctx, out, cl, dir, ordersT.Name(), paymentsT.Name())
}

// produce writes n orders with murmur2 and, after each order is
// acknowledged, its payment with the given partitioner, stamped so that it
// claims the order. It returns how many payments landed on another
// partition number than their order.
func produce(ctx context.Context, cl *excluster.Cluster, partitioner kgo.Partitioner, orders, payments string, n int) (int, error) {
	orderer, err := cl.NewClient()
	if err != nil {
		return 0, err
	}
	defer orderer.Close()
	payer, err := cl.NewClient(kgo.RecordPartitioner(partitioner))
	if err != nil {
		return 0, err
	}
	defer payer.Close()
	clk := clock.New(cl.Admin)
	send := func(c *kgo.Client, rec *kgo.Record) error {
		if err := clk.Stamp(ctx, rec); err != nil {
			return err
		}
		if err := c.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return err
		}
		return clk.RecordProduced(rec)
	}
	misplaced := 0
	for i := 1; i <= n; i++ {
		id := []byte(fmt.Sprintf("o-%d", i))
		order := &kgo.Record{Topic: orders, Key: id, Value: []byte("order")}
		if err := send(orderer, order); err != nil {
			return 0, err
		}
		pay := &kgo.Record{Topic: payments, Key: id, Value: []byte("payment")}
		if err := send(payer, pay); err != nil {
			return 0, err
		}
		if pay.Partition != order.Partition {
			misplaced++
		}
	}
	return misplaced, nil
}

// readAll reads want records of topic, read_committed.
func readAll(ctx context.Context, cl *excluster.Cluster, topic string, want int) ([]*kgo.Record, error) {
	c, err := cl.NewClient(kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var got []*kgo.Record
	for len(got) < want {
		fs := c.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("read %s: %d of %d records: %w", topic, len(got), want, err)
		}
		got = append(got, fs.Records()...)
	}
	return got, nil
}

// scan runs the observer over the inputs and prints its findings.
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
	fmt.Fprintf(out, "observer: %d findings\n", len(fs))
	for _, f := range fs {
		fmt.Fprintf(out, "  %s\n", f)
	}
	return nil
}

// lockedBuffer is a log sink safe for the stage's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
