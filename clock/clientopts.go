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
// docs/performance.md, "Real Kafka: broker failover", has the measurements.
//
// Put them before your own options, which then override them:
//
//	opts := append(clock.ClientOpts(), kgo.SeedBrokers(seeds...), kgo.TransactionalID(id))
//	cl, err := kgo.NewClient(opts...)
//
// Options alone cannot keep a dead broker out of the client's seed list,
// which a transactional client needs through a broker failure; NewClient
// does that too.
func ClientOpts() []kgo.Opt { return kclient.Opts() }

// NewClient is kgo.NewClient(append(ClientOpts(), opts...)...) with one
// more thing a client needs through a broker failure: while a broker
// refuses connections its address leaves the client's seed list, and it
// returns once the broker accepts one (the list is never emptied).
//
// franz-go sends a coordinator lookup to its discovered brokers in turn and
// once a round to a seed address, and one of the seeds is the dead
// broker's; a lookup that fails to dial ends the request waiting on it
// (franz-go v1.22) — an EndTxn whose outcome is then unknown, a
// TxnOffsetCommit, a heartbeat. The seeds are read from the SeedBrokers
// option; a client that calls UpdateSeedBrokers itself (or sets
// OnRebootstrapRequired) should build with kgo.NewClient instead.
func NewClient(opts ...kgo.Opt) (*kgo.Client, error) {
	return kclient.NewClient(append(ClientOpts(), opts...)...)
}
