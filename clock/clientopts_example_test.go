package clock_test

import (
	"fmt"
	"time"

	"github.com/parsley-go/parsley/clock"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A stamped producer's client starts from the failover options; options
// after them override them.
func ExampleClientOpts() {
	opts := append(clock.ClientOpts(),
		kgo.SeedBrokers("127.0.0.1:9092"),
		kgo.TransactionalID("invoicer"),
		kgo.RequestRetries(50), // overrides the default
	)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()
	fmt.Println(cl.OptValue(kgo.MetadataMinAge).(time.Duration), cl.OptValue(kgo.RequestRetries))
	// Output: 100ms 50
}

// NewClient builds the same client, which also keeps a broker that refuses
// connections out of its seed list until it is back.
func ExampleNewClient() {
	cl, err := clock.NewClient(
		kgo.SeedBrokers("127.0.0.1:9092", "127.0.0.1:9093", "127.0.0.1:9094"),
		kgo.TransactionalID("invoicer"),
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()
	fmt.Println(cl.OptValue(kgo.MetadataMinAge).(time.Duration))
	// Output: 100ms
}
