// Command request-reply shows effect before reply. A "bank" stage consumes
// transfer requests and, for each, first writes the effect (a ledger entry)
// and then the reply. Its stamps order one task's sends across all its
// sinks, so any processor that consumes both the ledger and the replies —
// here an "audit" stage — sees every ledger entry before the reply that
// announced it, even though they travel on different topics.
//
//	transfers ─► bank ─┬─► ledger ──┐
//	                   └─► replies ─┴─► audit ─► audit-log
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/parsley-go/parsley/examples/internal/excli"
	"github.com/parsley-go/parsley/examples/internal/excluster"
	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kgo"
)

// appName is the application ID under the run prefix.
const appName = "request-reply"

func main() {
	os.Exit(excli.Main(command(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func command() excli.Command {
	var n int
	return excli.Command{
		Name:    "request-reply",
		Summary: "Shows effect before reply: a bank stage writes each transfer's ledger entry, then its reply,\nand no client sees a reply before its effect.",
		Flags: func(fs *flag.FlagSet) func() error {
			fs.IntVar(&n, "requests", 6, "how many transfer requests to send (1 to 1000)")
			return func() error { return excli.IntRange("requests", n, 1, 1000) }
		},
		Run: func(ctx context.Context, out io.Writer, t excli.Target) error { return run(ctx, out, t, n) },
	}
}

func run(ctx context.Context, out io.Writer, t excli.Target, n int) error {
	app := t.Name(appName)
	transfers := stage.NewTopic(t.Name("transfers"), stage.String(), stage.Int64())
	ledger := stage.NewTopic(t.Name("ledger"), stage.String(), stage.String())
	replies := stage.NewTopic(t.Name("replies"), stage.String(), stage.String())
	auditLog := stage.NewTopic(t.Name("audit-log"), stage.String(), stage.String())

	bank := stage.On(stage.Named("bank"), transfers, func(m stage.Message[string, int64]) ([]stage.Emission, error) {
		return []stage.Emission{
			ledger.Send(m.Key, fmt.Sprintf("debit %d", m.Value)), // the effect first
			replies.Send(m.Key, "ok"),                            // then the reply
		}, nil
	}).Into(ledger, replies).MustBuild()

	ab := stage.Named("audit")
	stage.On(ab, ledger, func(m stage.Message[string, string]) ([]stage.Emission, error) {
		return []stage.Emission{auditLog.Send(m.Key, "ledger "+m.Value)}, nil
	})
	stage.On(ab, replies, func(m stage.Message[string, string]) ([]stage.Emission, error) {
		return []stage.Emission{auditLog.Send(m.Key, "reply "+m.Value)}, nil
	})
	audit := ab.Into(auditLog).MustBuild()

	const parts = 2
	cl, err := excluster.Open(ctx, out, t,
		excluster.Topic{Name: transfers.Name(), Partitions: parts},
		excluster.Topic{Name: ledger.Name(), Partitions: parts},
		excluster.Topic{Name: replies.Name(), Partitions: parts},
		excluster.Topic{Name: auditLog.Name(), Partitions: parts},
		excluster.Topic{Name: stage.ChangelogTopic(app, "bank"), Partitions: parts, Compact: true},
		excluster.Topic{Name: stage.ChangelogTopic(app, "audit"), Partitions: parts, Compact: true},
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	_, stop, err := cl.StartApp(ctx, app, bank, audit)
	if err != nil {
		return err
	}
	defer stop()

	// The requester is a plain client: it sends requests and reads replies.
	req, err := cl.NewClient(kgo.ConsumeTopics(replies.Name()), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return err
	}
	defer req.Close()
	for i := 1; i <= n; i++ {
		v, _ := stage.Int64().Encode(int64(100 * i))
		r := &kgo.Record{Topic: transfers.Name(), Key: []byte(fmt.Sprintf("t-%d", i)), Value: v}
		if err := req.ProduceSync(ctx, r).FirstErr(); err != nil {
			return err
		}
	}
	for got := 0; got < n; {
		fs := req.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("waiting for replies: %w", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			fmt.Fprintf(out, "requester: reply for %s: %s\n", r.Key, r.Value)
			got++
		})
	}

	// The audit stage saw each ledger entry before its reply.
	seenLedger := map[string]bool{}
	got := 0
	err = cl.Consume(ctx, auditLog.Name(), func(r *kgo.Record) (bool, error) {
		got++
		k, v := string(r.Key), string(r.Value)
		fmt.Fprintf(out, "audit: %s %s\n", k, v)
		switch {
		case strings.HasPrefix(v, "ledger "):
			seenLedger[k] = true
		case !seenLedger[k]:
			return true, fmt.Errorf("audit saw the reply for %s before its ledger entry", k)
		}
		return got == 2*n, nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "effect before reply held for all %d requests\n", n)
	return nil
}
