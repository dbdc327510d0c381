// Command ticks shows time entering pure logic safely. A "tills" stage
// keeps a running total per till and, every interval, closes a window: its
// tick fold counts the windows in the stage's reserved per-partition tick
// slot and reports each one.
//
// A tick is an ordinary stamped record on the stage's own tick topic
// (<app>-<stage>-ticks), emitted inside a step and delivered back through the
// causal gate. Its stamp is a cut of everything the task had received when
// the interval fired, so a consumer of both the totals and the window
// reports — here the "audit" stage — sees every total a window covers
// before the window's report.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/parsley-go/parsley/examples/internal/excli"
	"github.com/parsley-go/parsley/examples/internal/excluster"
	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kgo"
)

// appName is the application ID under the run prefix.
const appName = "ticks"

func main() {
	os.Exit(excli.Main(command(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func command() excli.Command {
	var every time.Duration
	var windows int
	return excli.Command{
		Name:    "ticks",
		Summary: "Shows time entering pure logic safely: a stage keeps a running total per till and closes a\nwindow on every tick.",
		Flags: func(fs *flag.FlagSet) func() error {
			fs.DurationVar(&every, "every", 300*time.Millisecond, "tick interval (10ms to 1m)")
			fs.IntVar(&windows, "windows", 4, "how many windows to close before stopping (1 to 100)")
			return func() error {
				return errors.Join(excli.DurationRange("every", every, 10*time.Millisecond, time.Minute), excli.IntRange("windows", windows, 1, 100))
			}
		},
		Run: func(ctx context.Context, out io.Writer, t excli.Target) error {
			return run(ctx, out, t, every, windows)
		},
	}
}

func run(ctx context.Context, out io.Writer, t excli.Target, every time.Duration, windows int) error {
	app := t.Name(appName)
	sales := stage.NewTopic(t.Name("sales"), stage.String(), stage.Int64())
	totals := stage.NewTopic(t.Name("totals"), stage.String(), stage.Int64())
	reports := stage.NewTopic(t.Name("window-reports"), stage.String(), stage.String())
	auditLog := stage.NewTopic(t.Name("audit-log"), stage.String(), stage.String())

	// One state type serves every till's total and the tick slot's window
	// count: the tick slot is distinct from every key.
	b := stage.WithState(stage.Named("tills"), stage.Int64(), 0)
	stage.OnFold(b, sales, func(total int64, m stage.Message[string, int64]) (stage.Step[int64], error) {
		total += m.Value
		return stage.Next(total, totals.Send(m.Key, total)), nil
	})
	stage.TicksFold(b, every, func(window int64, t stage.Tick) (stage.Step[int64], error) {
		window++
		return stage.Next(window, reports.Send(fmt.Sprint(t.Partition), fmt.Sprintf("window %d closed", window))), nil
	})
	tills := b.Into(totals, reports).MustBuild()

	ab := stage.Named("audit")
	stage.On(ab, totals, func(m stage.Message[string, int64]) ([]stage.Emission, error) {
		return []stage.Emission{auditLog.Send(m.Key, fmt.Sprintf("total %s=%d", m.Key, m.Value))}, nil
	})
	stage.On(ab, reports, func(m stage.Message[string, string]) ([]stage.Emission, error) {
		return []stage.Emission{auditLog.Send(m.Key, m.Value)}, nil
	})
	audit := ab.Into(auditLog).MustBuild()

	// One partition keeps the printed story in one order.
	cl, err := excluster.Open(ctx, out, t,
		excluster.Topic{Name: sales.Name(), Partitions: 1},
		excluster.Topic{Name: totals.Name(), Partitions: 1},
		excluster.Topic{Name: reports.Name(), Partitions: 1},
		excluster.Topic{Name: auditLog.Name(), Partitions: 1},
		excluster.Topic{Name: stage.TickTopic(app, "tills"), Partitions: 1},
		excluster.Topic{Name: stage.ChangelogTopic(app, "tills"), Partitions: 1, Compact: true},
		excluster.Topic{Name: stage.ChangelogTopic(app, "audit"), Partitions: 1, Compact: true},
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	_, stop, err := cl.StartApp(ctx, app, tills, audit)
	if err != nil {
		return err
	}
	defer stop()

	// A few sales per window, from a plain producer.
	p, err := cl.NewClient()
	if err != nil {
		return err
	}
	defer p.Close()
	sent := 0
	for w := 0; w < windows; w++ {
		for _, till := range []string{"north", "south"} {
			v, _ := stage.Int64().Encode(int64(10 + w))
			if err := p.ProduceSync(ctx, &kgo.Record{Topic: sales.Name(), Key: []byte(till), Value: v}).FirstErr(); err != nil {
				return err
			}
			sent++
		}
		time.Sleep(every)
	}

	totalsSeen, windowsSeen := 0, 0
	err = cl.Consume(ctx, auditLog.Name(), func(r *kgo.Record) (bool, error) {
		v := string(r.Value)
		if strings.HasPrefix(v, "window ") {
			windowsSeen++
			fmt.Fprintf(out, "audit: %s (after %d totals)\n", v, totalsSeen)
		} else {
			totalsSeen++
			fmt.Fprintf(out, "audit: %s\n", v)
		}
		return totalsSeen >= sent && windowsSeen >= windows, nil
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%d sales totalled across %d or more windows\n", sent, windows)
	return nil
}
