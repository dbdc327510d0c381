package headers_test

import (
	"errors"
	"fmt"

	"github.com/parsley-go/parsley/headers"
)

func Example() {
	orders, _ := headers.ParseTopicID("6f1c2d3e-4a5b-4c6d-8e7f-0a1b2c3d4e5f")

	// A plain producer that consumed orders/0 up to offset 41 stamps its
	// next record with that claim.
	var s headers.Stamp
	s.Clock.SetOffset(headers.Channel{Topic: orders, Partition: 0}, 41)
	hs, err := headers.AppendStamp([]headers.Header{{Key: "trace-id", Value: []byte("t1")}}, &s, headers.DialectCauses)
	if err != nil {
		panic(err)
	}
	for _, h := range hs {
		fmt.Printf("%s: %d bytes\n", h.Key, len(h.Value))
	}

	// A receiver reads the stamp back, whichever dialect it came in.
	var got headers.Stamp
	if err := headers.ReadStamp(&got, hs); err != nil {
		panic(err)
	}
	off, _ := got.Clock.Offset(headers.Channel{Topic: orders, Partition: 0})
	fmt.Println("claims orders/0 up to", off)
	// Output:
	// trace-id: 2 bytes
	// parsley.causes: 28 bytes
	// claims orders/0 up to 41
}

func ExampleReadStamp_failClosed() {
	var s headers.Stamp
	err := headers.ReadStamp(&s, []headers.Header{{Key: headers.HeaderCauses, Value: []byte{0x02, 0x00}}})
	fmt.Println(errors.Is(err, headers.ErrUndecodable))
	fmt.Println(err)
	// Output:
	// true
	// headers: parsley.causes: byte 0: unknown version 2
}

func ExampleAppendStamp_reservedHeader() {
	_, err := headers.AppendStamp([]headers.Header{{Key: "vc", Value: []byte("mine")}}, &headers.Stamp{}, headers.DialectVC)
	fmt.Println(errors.Is(err, headers.ErrReservedHeader))
	// Output: true
}

func ExampleClock_Dominates() {
	t, _ := headers.ParseTopicID("6f1c2d3e-4a5b-4c6d-8e7f-0a1b2c3d4e5f")
	p0 := headers.Channel{Topic: t, Partition: 0}
	var delivered, needs headers.Clock
	delivered.SetOffset(p0, 10)
	needs.SetOffset(p0, 12)
	fmt.Println(delivered.Dominates(&needs))
	delivered.SetOffset(p0, 12)
	fmt.Println(delivered.Dominates(&needs))
	// Output:
	// false
	// true
}

func ExampleClock_Merge() {
	t, _ := headers.ParseTopicID("6f1c2d3e-4a5b-4c6d-8e7f-0a1b2c3d4e5f")
	var a, b headers.Clock
	a.SetOffset(headers.Channel{Topic: t, Partition: 0}, 5)
	b.SetOffset(headers.Channel{Topic: t, Partition: 0}, 3)
	b.SetOffset(headers.Channel{Topic: t, Partition: 1}, 7)
	a.Merge(&b)
	for e := range a.OffsetEntries() {
		fmt.Println(e.Channel.Partition, e.Offset)
	}
	// Output:
	// 0 5
	// 1 7
}
