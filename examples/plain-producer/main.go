// Command plain-producer shows the plain-client edge (package clock): a
// sequential franz-go producer that stamps its records, and a consumer that
// folds what it consumed before producing, so its output claims its input
// and everything that input claimed.
//
// It prints each record's decoded stamp: which offsets on which channels it
// claims.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/examples/internal/excli"
	"github.com/parsley-go/parsley/examples/internal/excluster"
	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	os.Exit(excli.Main(command(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

func command() excli.Command {
	var dialect string
	return excli.Command{
		Name:    "plain-producer",
		Summary: "Stamps a plain franz-go producer's records with package clock, and shows a consumer's output\nclaiming its input.",
		Flags: func(fs *flag.FlagSet) func() error {
			fs.StringVar(&dialect, "dialect", "vc", "stamp dialect: vc or causes")
			return func() error {
				if dialect != "vc" && dialect != "causes" {
					return fmt.Errorf("%w: invalid --dialect %q: want vc or causes", excli.ErrUsage, dialect)
				}
				return nil
			}
		},
		Run:     func(ctx context.Context, out io.Writer, t excli.Target) error { return run(ctx, out, t, dialect) },
		Timeout: time.Minute,
	}
}

func run(ctx context.Context, out io.Writer, t excli.Target, dialect string) error {
	var d headers.Dialect
	switch dialect {
	case "vc":
		d = headers.DialectVC
	case "causes":
		d = headers.DialectCauses
	default:
		return fmt.Errorf("unknown dialect %q: want vc or causes", dialect)
	}
	signups, profiles, welcomes := t.Name("signups"), t.Name("profiles"), t.Name("welcomes")
	cl, err := excluster.Open(ctx, out, t,
		excluster.Topic{Name: signups, Partitions: 1},
		excluster.Topic{Name: profiles, Partitions: 1},
		excluster.Topic{Name: welcomes, Partitions: 1})
	if err != nil {
		return err
	}
	defer cl.Close()
	names := map[headers.TopicID]string{}
	res := clock.NewResolver(cl.Admin, clock.DefaultTopicIDMaxAge)
	for _, name := range []string{signups, profiles, welcomes} {
		id, err := res.TopicID(ctx, name)
		if err != nil {
			return err
		}
		names[id] = name
	}

	// A sequential producer: send, wait for the acknowledgement, fold it.
	// Each send claims every earlier one, across topics.
	prod, err := cl.NewClient()
	if err != nil {
		return err
	}
	defer prod.Close()
	clk := clock.New(cl.Admin, clock.Dialect(d))
	for _, r := range []*kgo.Record{
		{Topic: signups, Key: []byte("ada"), Value: []byte("signed up")},
		{Topic: profiles, Key: []byte("ada"), Value: []byte("profile created")},
	} {
		if err := clk.Stamp(ctx, r); err != nil {
			return err
		}
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			return err
		}
		if err := clk.RecordProduced(r); err != nil {
			return err
		}
		describe(out, "producer wrote", r, names)
	}

	// A consumer that produces: fold each consumed record, then stamp.
	cons, err := cl.NewClient(kgo.ConsumeTopics(profiles), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return err
	}
	defer cons.Close()
	welcomer := clock.New(cl.Admin, clock.Dialect(d))
	var in *kgo.Record
	for in == nil {
		fs := cons.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
		if it := fs.RecordIter(); !it.Done() {
			in = it.Next()
		}
	}
	if err := welcomer.Observe(in); err != nil {
		return err
	}
	w := &kgo.Record{Topic: welcomes, Key: in.Key, Value: []byte("welcome, " + string(in.Key))}
	if err := welcomer.Stamp(ctx, w); err != nil {
		return err
	}
	if err := prod.ProduceSync(ctx, w).FirstErr(); err != nil {
		return err
	}
	describe(out, "consumer-producer wrote", w, names)
	return nil
}

// describe prints a record's coordinate and the claims of its stamp.
func describe(out io.Writer, who string, r *kgo.Record, names map[headers.TopicID]string) {
	s, err := clock.ReadRecordStamp(r)
	if err != nil {
		fmt.Fprintf(out, "%s %s/%d@%d: undecodable stamp: %v\n", who, r.Topic, r.Partition, r.Offset, err)
		return
	}
	var claims []string
	for e := range s.Clock.OffsetEntries() {
		claims = append(claims, fmt.Sprintf("%s/%d@%d", names[e.Channel.Topic], e.Channel.Partition, e.Offset))
	}
	if len(claims) == 0 {
		claims = []string{"nothing"}
	}
	var keys []string
	for _, h := range r.Headers {
		keys = append(keys, h.Key)
	}
	fmt.Fprintf(out, "%s %s/%d@%d %q [headers %s] claims %s\n", who, r.Topic, r.Partition, r.Offset, r.Value,
		strings.Join(keys, ","), strings.Join(claims, ", "))
}
