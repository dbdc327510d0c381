// Command settlements shows a stateful fan-in. Three plain services write
// three topics: billing writes invoices; a payer consumes invoices and pays
// each one; a refunder consumes payments and refunds every second one. The
// payer and refunder fold what they consume into their clocks (package
// clock) before producing, so a refund claims its payment and, through it,
// the invoice.
//
//	billing ─► invoices ─► payer ─► payments ─► refunder ─► refunds
//	              │                    │                       │
//	              └────────────────────┴──► ledger (fold) ◄────┘ ─► balances
//
// The ledger stage starts only after everything was written, so it fetches
// the three topics in whatever order the broker serves them; the causal gate
// still folds every invoice before its payment and every payment before its
// refund.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/examples/internal/excli"
	"github.com/parsley-go/parsley/examples/internal/excluster"
	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kgo"
)

// appName is the application ID under the run prefix.
const appName = "settlements"

func main() {
	os.Exit(excli.Main(command(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func command() excli.Command {
	var n int
	return excli.Command{
		Name:    "settlements",
		Summary: "Shows a stateful fan-in: invoices, payments and refunds from three plain services, settled\nper account in causal order.",
		Flags: func(fs *flag.FlagSet) func() error {
			fs.IntVar(&n, "invoices", 30, "how many invoices to write (1 to 10000)")
			return func() error { return excli.IntRange("invoices", n, 1, 10000) }
		},
		Run: func(ctx context.Context, out io.Writer, t excli.Target) error { return run(ctx, out, t, n) },
	}
}

// account is the ledger's state per invoice.
type account struct {
	Invoiced, Paid, Refunded bool
}

func run(ctx context.Context, out io.Writer, t excli.Target, n int) error {
	app := t.Name(appName)
	invoices := stage.NewTopic(t.Name("invoices"), stage.String(), stage.Int64())
	payments := stage.NewTopic(t.Name("payments"), stage.String(), stage.Int64())
	refunds := stage.NewTopic(t.Name("refunds"), stage.String(), stage.Int64())
	balances := stage.NewTopic(t.Name("balances"), stage.String(), stage.String())

	b := stage.WithState(stage.Named("ledger"), stage.JSON[account](), account{})
	stage.OnFold(b, invoices, func(s account, m stage.Message[string, int64]) (stage.Step[account], error) {
		s.Invoiced = true
		return stage.Next(s, balances.Send(m.Key, fmt.Sprintf("owes %d", m.Value))), nil
	})
	stage.OnFold(b, payments, func(s account, m stage.Message[string, int64]) (stage.Step[account], error) {
		if !s.Invoiced {
			return stage.Next(s, balances.Send(m.Key, "VIOLATION: paid before invoiced")), nil
		}
		s.Paid = true
		return stage.Next(s, balances.Send(m.Key, "settled")), nil
	})
	stage.OnFold(b, refunds, func(s account, m stage.Message[string, int64]) (stage.Step[account], error) {
		if !s.Paid {
			return stage.Next(s, balances.Send(m.Key, "VIOLATION: refunded before paid")), nil
		}
		s.Refunded = true
		return stage.Next(s, balances.Send(m.Key, fmt.Sprintf("refunded %d", m.Value))), nil
	})
	ledger := b.Into(balances).MustBuild()

	const parts = 3
	cl, err := excluster.Open(ctx, out, t,
		excluster.Topic{Name: invoices.Name(), Partitions: parts},
		excluster.Topic{Name: payments.Name(), Partitions: parts},
		excluster.Topic{Name: refunds.Name(), Partitions: parts},
		excluster.Topic{Name: balances.Name(), Partitions: parts},
		excluster.Topic{Name: stage.ChangelogTopic(app, "ledger"), Partitions: parts, Compact: true},
	)
	if err != nil {
		return err
	}
	defer cl.Close()

	if err := billing(ctx, cl, invoices.Name(), n); err != nil {
		return fmt.Errorf("billing: %w", err)
	}
	paid, err := relay(ctx, cl, invoices.Name(), payments.Name(), n, func(r *kgo.Record) bool { return true })
	if err != nil {
		return fmt.Errorf("payer: %w", err)
	}
	refunded, err := relay(ctx, cl, payments.Name(), refunds.Name(), paid, func(r *kgo.Record) bool {
		var i int
		fmt.Sscanf(string(r.Key), "inv-%d", &i)
		return i%2 == 0
	})
	if err != nil {
		return fmt.Errorf("refunder: %w", err)
	}
	fmt.Fprintf(out, "written: %d invoices, %d payments, %d refunds\n", n, paid, refunded)

	_, stop, err := cl.StartApp(ctx, app, ledger)
	if err != nil {
		return err
	}
	defer stop()

	want := n + paid + refunded
	last := map[string]string{}
	violations := 0
	got := 0
	err = cl.Consume(ctx, balances.Name(), func(r *kgo.Record) (bool, error) {
		got++
		last[string(r.Key)] = string(r.Value)
		if strings.HasPrefix(string(r.Value), "VIOLATION") {
			violations++
			fmt.Fprintf(out, "%s: %s\n", r.Key, r.Value)
		}
		return got == want, nil
	})
	if err != nil {
		return err
	}
	for _, k := range []string{"inv-1", "inv-2", fmt.Sprintf("inv-%d", n)} {
		fmt.Fprintf(out, "final balance %s: %s\n", k, last[k])
	}
	fmt.Fprintf(out, "ledger folded %d events, %d out of causal order\n", want, violations)
	if violations > 0 {
		return fmt.Errorf("%d events were folded before their causes", violations)
	}
	return nil
}

// billing writes n invoices from a sequential, stamped producer.
func billing(ctx context.Context, cl *excluster.Cluster, invoices string, n int) error {
	p, err := cl.NewClient()
	if err != nil {
		return err
	}
	defer p.Close()
	clk := clock.New(cl.Admin)
	for i := 1; i <= n; i++ {
		v, _ := stage.Int64().Encode(int64(10 * i))
		r := &kgo.Record{Topic: invoices, Key: []byte(fmt.Sprintf("inv-%d", i)), Value: v}
		if err := clk.Stamp(ctx, r); err != nil {
			return err
		}
		if err := p.ProduceSync(ctx, r).FirstErr(); err != nil {
			return err
		}
		if err := clk.RecordProduced(r); err != nil {
			return err
		}
	}
	return nil
}

// relay consumes want records of from and, for each that keep accepts,
// writes one record to to, stamped after folding the consumed record. It
// returns how many it wrote.
func relay(ctx context.Context, cl *excluster.Cluster, from, to string, want int, keep func(*kgo.Record) bool) (int, error) {
	c, err := cl.NewClient(kgo.ConsumeTopics(from), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return 0, err
	}
	defer c.Close()
	clk := clock.New(cl.Admin)
	wrote := 0
	for got := 0; got < want; {
		fs := c.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return wrote, err
		}
		for it := fs.RecordIter(); !it.Done(); {
			in := it.Next()
			got++
			if err := clk.Observe(in); err != nil {
				return wrote, err
			}
			if !keep(in) {
				continue
			}
			r := &kgo.Record{Topic: to, Key: in.Key, Value: in.Value}
			if err := clk.Stamp(ctx, r); err != nil {
				return wrote, err
			}
			if err := c.ProduceSync(ctx, r).FirstErr(); err != nil {
				return wrote, err
			}
			if err := clk.RecordProduced(r); err != nil {
				return wrote, err
			}
			wrote++
		}
	}
	return wrote, nil
}
