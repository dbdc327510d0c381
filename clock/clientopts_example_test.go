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
