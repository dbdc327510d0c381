package clock

import (
	"github.com/parsley-go/parsley/internal/kclient"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ClientOpts returns the franz-go options the library's own clients start
// from, for the client of a stamped producer or of the admin client given
// to New. They make a client follow a partition leader or a transaction
// coordinator to its new broker within a few hundred milliseconds of the
// cluster moving it, where franz-go's defaults take up to 5 s more:
// metadata may be refreshed again 100 ms after a refresh (franz-go: 5 s),
// failed requests are retried after 100 ms doubling to 250 ms (franz-go:
// 250 ms doubling to 5 s) and up to 200 times (franz-go: 20), so that the
// retry timeout, not the count, ends a request retried through an outage.
// docs/performance.md, "Broker failover (#37)", has the measurements.
//
// Put them before your own options, which then override them:
//
//	opts := append(clock.ClientOpts(), kgo.SeedBrokers(seeds...), kgo.TransactionalID(id))
//	cl, err := kgo.NewClient(opts...)
func ClientOpts() []kgo.Opt { return kclient.Opts() }
