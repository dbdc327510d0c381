package protocol_test

import (
	"context"
	"fmt"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
)

// brokerView is the host's answer to the node's broker questions; here,
// every topic exists and is empty.
type brokerView struct{}

func (brokerView) EndOffsets(context.Context, headers.TopicID) ([]int64, bool, error) {
	return []int64{0}, true, nil
}

func (brokerView) LogStarts(context.Context, headers.TopicID) ([]int64, bool, error) {
	return []int64{0}, true, nil
}

// A node consuming two channels holds an effect until its cause arrives,
// then releases both in causal order; its own send is stamped with what it
// delivered.
func Example() {
	orders := headers.Channel{Topic: headers.TopicID{1}, Partition: 0}
	payments := headers.Channel{Topic: headers.TopicID{2}, Partition: 0}
	receipts := headers.TopicID{3}

	store := protocol.NewMemStore()
	node, err := protocol.New(context.Background(), protocol.Config{
		ApplicationID: "shop", Stage: "receipts", Partition: 0,
		Inputs: []headers.Channel{orders, payments},
		Sinks:  []headers.TopicID{receipts},
		Store:  store, Offsets: brokerView{},
	})
	if err != nil {
		panic(err)
	}

	// A payment that claims order 7: it arrives first.
	var cause headers.Stamp
	cause.Clock.SetOffset(orders, 7)
	hs, _ := headers.AppendStamp([]headers.Header(nil), &cause, headers.DialectVC)
	payment := &protocol.Record{Coordinate: headers.Coordinate{Channel: payments, Offset: 0}, Value: []byte("paid"), Headers: hs}
	ds, _ := node.OnRecord(payment)
	fmt.Println("after the payment:", len(ds), "delivered")

	order := &protocol.Record{Coordinate: headers.Coordinate{Channel: orders, Offset: 7}, Value: []byte("order")}
	ds, _ = node.OnRecord(order)
	for _, d := range ds {
		fmt.Printf("deliver %s at offset %d\n", d.Value, d.Offset)
	}

	stamp, _ := node.PrepareSend(headers.Channel{Topic: receipts, Partition: 0})
	o, _ := stamp.Clock.Offset(orders)
	fmt.Println("the receipt claims orders up to", o, "and is send", stamp.Seq)

	// End of step: write the state, then commit it with offsets and sends.
	if err := node.Flush(); err != nil {
		panic(err)
	}
	// Output:
	// after the payment: 0 delivered
	// deliver order at offset 7
	// deliver paid at offset 0
	// the receipt claims orders up to 7 and is send 0
}
