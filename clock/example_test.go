package clock_test

import (
	"context"
	"fmt"
	"log"
	"slices"
	"strings"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A sequential producer: stamp, send, wait for the acknowledgement, fold
// it. Each record claims every send before it, across topics.
func Example_sequentialProducer() {
	ctx := context.Background()
	// An in-process cluster; against a real one only the seed brokers change.
	kafka, err := broker.Start(ctx, broker.Topics(broker.Topic{Name: "orders"}, broker.Topic{Name: "payments"}))
	if err != nil {
		log.Fatal(err)
	}
	defer kafka.Close()
	client, admin := kafka.Client(), kafka.Admin()

	clk := clock.New(admin)
	for _, topic := range []string{"orders", "payments", "orders"} {
		rec := &kgo.Record{Topic: topic, Value: []byte("event")}
		if err := clk.Stamp(ctx, rec); err != nil {
			log.Fatal(err)
		}
		res := client.ProduceSync(ctx, rec)
		if err := res.FirstErr(); err != nil {
			log.Fatal(err)
		}
		if err := clk.RecordProduced(res[0].Record); err != nil {
			log.Fatal(err)
		}
		fmt.Println(describe(ctx, admin, rec))
	}
	// Output:
	// orders@0 claims nothing
	// payments@0 claims orders/0@0
	// orders@1 claims orders/0@0 payments/0@0
}

// Consume, then produce: a plain consumer that observes what it read makes
// its own records claim it, and everything it claimed.
func Example_consumeThenProduce() {
	ctx := context.Background()
	kafka, err := broker.Start(ctx, broker.Topics(
		broker.Topic{Name: "orders"}, broker.Topic{Name: "stock"}, broker.Topic{Name: "invoices"}))
	if err != nil {
		log.Fatal(err)
	}
	defer kafka.Close()
	admin := kafka.Admin()

	// Upstream: a stock reservation, then an order that depends on it.
	up := clock.New(admin)
	for _, topic := range []string{"stock", "orders"} {
		rec := &kgo.Record{Topic: topic}
		if err := up.Stamp(ctx, rec); err != nil {
			log.Fatal(err)
		}
		if err := kafka.Client().ProduceSync(ctx, rec).FirstErr(); err != nil {
			log.Fatal(err)
		}
		if err := up.RecordProduced(rec); err != nil {
			log.Fatal(err)
		}
	}

	// Downstream: a plain consumer of orders that writes invoices.
	consumer, err := kafka.NewClient(kgo.ConsumeTopics("orders"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		log.Fatal(err)
	}
	defer consumer.Close()
	clk := clock.New(admin)
	fetches := consumer.PollFetches(ctx)
	if err := fetches.Err0(); err != nil {
		log.Fatal(err)
	}
	for _, order := range fetches.Records() {
		if err := clk.Observe(order); err != nil { // the order's coordinate and its clock
			log.Fatal(err)
		}
		invoice := &kgo.Record{Topic: "invoices", Value: []byte("invoice")}
		if err := clk.Stamp(ctx, invoice); err != nil {
			log.Fatal(err)
		}
		if err := kafka.Client().ProduceSync(ctx, invoice).FirstErr(); err != nil {
			log.Fatal(err)
		}
		fmt.Println(describe(ctx, admin, invoice))
	}
	// Output:
	// invoices@0 claims orders/0@0 stock/0@0
}

// describe prints a record's coordinate and the offset claims its stamp
// carries, naming topics rather than IDs and sorted by name.
func describe(ctx context.Context, admin *kadm.Client, rec *kgo.Record) string {
	var s headers.Stamp
	if err := headers.ReadStamp(&s, rec.Headers); err != nil {
		return err.Error()
	}
	md, err := admin.Metadata(ctx)
	if err != nil {
		return err.Error()
	}
	names := make(map[headers.TopicID]string)
	for _, td := range md.Topics {
		names[headers.TopicID(td.ID)] = td.Topic
	}
	var cs []string
	for e := range s.Clock.OffsetEntries() {
		cs = append(cs, fmt.Sprintf("%s/%d@%d", names[e.Channel.Topic], e.Channel.Partition, e.Offset))
	}
	if len(cs) == 0 {
		cs = []string{"nothing"}
	}
	slices.Sort(cs)
	return fmt.Sprintf("%s@%d claims %s", rec.Topic, rec.Offset, strings.Join(cs, " "))
}

// Reading the sender tag of a record a stage sent, for observability.
func ExampleReadSender() {
	var s headers.Stamp
	s.Tagged, s.Sender, s.Seq = true, headers.SenderID{0x0f, 0x1e}, 41
	hs, err := headers.AppendStamp[kgo.RecordHeader](nil, &s, headers.DialectVC)
	if err != nil {
		log.Fatal(err)
	}
	sender, seq, ok, err := clock.ReadSender(hs)
	fmt.Println(sender, seq, ok, err)

	_, _, ok, err = clock.ReadSender([]kgo.RecordHeader{{Key: "trace-id"}})
	fmt.Println(ok, err)
	// Output:
	// 0f1e0000-0000-0000-0000-000000000000 41 true <nil>
	// false <nil>
}

// A transaction on a clock a plain producer shares: the transaction folds
// into a fork, merged on commit and dropped on abort, so the plain send
// stays claimed and the aborted one never is.
func ExampleClock_Fork() {
	ledger := headers.Channel{Topic: headers.TopicID{1}}
	audit := headers.Channel{Topic: headers.TopicID{2}}
	shared := clock.New(nil)
	claims := func() string {
		var out []string
		for _, ch := range []headers.Channel{ledger, audit} {
			if o, ok := shared.Snapshot().Offset(ch); ok {
				out = append(out, fmt.Sprint(o))
			} else {
				out = append(out, "none")
			}
		}
		return "ledger " + out[0] + ", audit " + out[1]
	}

	tx := shared.Fork()                                                  // BeginTransaction
	_ = tx.ProducedAt(headers.Coordinate{Channel: ledger, Offset: 0})    // a send in the transaction
	_ = shared.ProducedAt(headers.Coordinate{Channel: audit, Offset: 5}) // a plain send meanwhile
	fmt.Println("aborted:", claims())                                    // EndTransaction(TryAbort): drop tx

	tx = shared.Fork()
	_ = tx.ProducedAt(headers.Coordinate{Channel: ledger, Offset: 2})
	if err := shared.Merge(tx.Snapshot()); err != nil { // EndTransaction(TryCommit) succeeded
		log.Fatal(err)
	}
	fmt.Println("committed:", claims())
	// Output:
	// aborted: ledger none, audit 5
	// committed: ledger 2, audit 5
}
