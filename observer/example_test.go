package observer_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/obsdemo"
	"github.com/parsley-go/parsley/observer"
	"github.com/parsley-go/parsley/protocol"
)

func ExampleParseRef() {
	r, err := observer.ParseRef("orders/3@1207")
	fmt.Println(r.Topic, r.Partition, r.Offset, err)
	_, err = observer.ParseRef("orders/3")
	fmt.Println(err)
	// Output:
	// orders 3 1207 <nil>
	// observer: coordinate "orders/3": no '@' (want TOPIC/PARTITION@OFFSET): malformed coordinate
}

func ExampleDecodeValue() {
	var c headers.Clock
	c.SetOffset(headers.Channel{Topic: headers.TopicID{0x0f, 0x1e}, Partition: 2}, 41)
	b, _ := headers.EncodeCauses(&c)
	clk, header, err := observer.DecodeValue(fmt.Sprintf("%x", b), "")
	if err != nil {
		panic(err)
	}
	fmt.Print(header, ": ")
	observer.WriteClock(os.Stdout, clk, func(headers.TopicID) string { return "orders" })
	// Output:
	// parsley.causes: 1 offset entries, 0 sequence entries
	//   offset orders/2 ≤ 41
}

// An observer scans an embedded cluster on which a sender skipped a
// sequence number, and reports it.
func ExampleObserver_Scan() {
	ctx := context.Background()
	cl, err := broker.Start(ctx)
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	b, _ := obsdemo.NewBuilder(cl)
	defer b.Close()
	b.Create(ctx, 1, "payments")
	for _, seq := range []int64{1, 2, 4} {
		b.Stamped(ctx, "payments", 0, &headers.Stamp{Tagged: true, Sender: obsdemo.GapSender, Seq: seq})
	}

	dir, _ := os.MkdirTemp("", "observer-example-")
	defer os.RemoveAll(dir)
	st, err := observer.OpenStore(ctx, filepath.Join(dir, "observer.db"))
	if err != nil {
		panic(err)
	}
	defer st.Close()
	o, err := observer.New(observer.Config{Brokers: cl.Addrs(), Pattern: regexp.MustCompile("^payments$")}, st)
	if err != nil {
		panic(err)
	}
	defer o.Close()
	if err := o.Scan(ctx); err != nil {
		panic(err)
	}
	fs, err := o.Findings(ctx)
	if err != nil {
		panic(err)
	}
	for _, f := range fs {
		fmt.Println(f.Severity, f.Code, f.Topic, len(f.Coordinates))
	}
	// Output:
	// error sequence-gap payments 2
}

// A stage's changelog topic names its tasks' senders.
func ExampleSenderNamesOf() {
	names := observer.SenderNamesOf(map[string]int32{"shop-pricing-changelog": 2})
	for _, p := range []int32{0, 1} {
		n := names[protocol.SenderIDFor("shop", "pricing", p)]
		fmt.Println(n)
	}
	// Output:
	// shop/pricing/0
	// shop/pricing/1
}

// An acknowledged finding stays, with who and why, and no longer counts
// as open.
func ExampleStore_Acknowledge() {
	ctx := context.Background()
	cl, err := broker.Start(ctx)
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	b, _ := obsdemo.NewBuilder(cl)
	defer b.Close()
	b.Create(ctx, 1, "payments")
	for _, seq := range []int64{1, 2, 4} {
		b.Stamped(ctx, "payments", 0, &headers.Stamp{Tagged: true, Sender: obsdemo.GapSender, Seq: seq})
	}
	dir, _ := os.MkdirTemp("", "observer-example-")
	defer os.RemoveAll(dir)
	st, err := observer.OpenStore(ctx, filepath.Join(dir, "observer.db"))
	if err != nil {
		panic(err)
	}
	defer st.Close()
	o, err := observer.New(observer.Config{Brokers: cl.Addrs(), Topics: []string{"payments"}}, st)
	if err != nil {
		panic(err)
	}
	defer o.Close()
	if err := o.Scan(ctx); err != nil {
		panic(err)
	}
	fs, _ := o.Findings(ctx)
	fmt.Println(fs[0].Code, fs[0].State)
	f, err := st.Acknowledge(ctx, fs[0].ID, "alice", "sends lost in the outage")
	fmt.Println(f.State, f.Ack.By, err)
	// Output:
	// sequence-gap open
	// acknowledged alice <nil>
}
