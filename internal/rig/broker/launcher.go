package broker

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Launcher is the one vocabulary of the module's Kafka launchers: Cluster
// here (kfake, or a leased real broker with PARSLEY_BROKERS) and the real
// multi-node cluster of internal/rig/testkafka speak it, so a soak or a
// test written against a Launcher runs on either.
type Launcher interface {
	// Addrs returns the brokers' listen addresses, usable as seed brokers.
	Addrs() []string
	// NewClient returns a new client seeded with Addrs, with test
	// defaults that opts come after and may override. The caller closes
	// it.
	NewClient(opts ...kgo.Opt) (*kgo.Client, error)
	// CreateTopics creates the topics and returns once each exists. An
	// error names the topic that failed.
	CreateTopics(ctx context.Context, ts ...Topic) error
	// Close stops what the launcher started (or ends its lease). It is
	// safe to call more than once.
	Close() error
}

// Nodes is a Launcher's broker-fault plug-in: a launcher whose brokers are
// processes of their own can kill and restart them one at a time
// (testkafka.Cluster does; the embedded Cluster does not).
type Nodes interface {
	// NodeIDs returns the broker IDs, in order.
	NodeIDs() []int32
	// Kill stops broker id at once (SIGKILL), as a crash would.
	Kill(id int32) error
	// Restart starts broker id again on its data and returns once it
	// serves.
	Restart(ctx context.Context, id int32) error
}

var _ Launcher = (*Cluster)(nil)
