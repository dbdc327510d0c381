package state

import (
	"context"
	"errors"
	"fmt"

	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kadm"
)

// Incarnation identifies one life of a changelog topic: the cluster that
// holds it and the ID Kafka gave the topic when it was created (KIP-516).
// A topic deleted and created again under the same name, or a topic of the
// same name on another cluster, is another incarnation: its offsets say
// nothing about a store that mirrored the first one.
type Incarnation struct {
	Cluster string // the cluster ID; empty if the broker reports none
	TopicID headers.TopicID
}

func (i Incarnation) String() string {
	return fmt.Sprintf("topic ID %s in cluster %q", i.TopicID, i.Cluster)
}

// ErrNoTopicID: the broker reports no topic ID for the changelog, so a
// recreated topic cannot be told from the original. Brokers older than
// Kafka 2.8 (or with inter.broker.protocol.version below 2.8) do this.
var ErrNoTopicID = errors.New("state: changelog has no topic ID (Kafka 2.8 or later assigns them)")

// ErrChangelogBehind: the store's checkpoint is past the end of the very
// changelog it mirrors (same topic ID, same cluster): the broker lost
// records it had acknowledged as committed. The concrete error is a
// *ChangelogLostError.
var ErrChangelogBehind = errors.New("state: changelog ends before the store's checkpoint")

// ChangelogLostError reports a changelog partition that ends before the
// checkpoint of a store that mirrored this same incarnation of it. Records
// the broker acknowledged as committed are gone — an unclean leader
// election, or brokers restored from an older disk or snapshot. Rebuilding
// from what is left would silently drop committed state, while the outputs
// and consumer offsets committed with it stay: Restore refuses instead.
type ChangelogLostError struct {
	Path        string // the store's file
	Topic       string
	Partition   int32
	Incarnation Incarnation
	End         int64 // the changelog partition's high watermark
	Checkpoint  int64 // the store's checkpoint, past End
}

func (e *ChangelogLostError) Error() string {
	return fmt.Sprintf("%v: store %s mirrors %s[%d] (%s) up to offset %d, but the broker's log of that same topic ends at %d: "+
		"the broker lost records it had committed (an unclean leader election, or brokers restored from an older disk). "+
		"Restore the brokers' data if you can; otherwise stop every instance, delete this store file, and restart to rebuild it "+
		"from what the changelog still holds, accepting that state the broker lost stays lost",
		ErrChangelogBehind, e.Path, e.Topic, e.Partition, e.Incarnation, e.Checkpoint, e.End)
}

// Unwrap makes errors.Is(err, ErrChangelogBehind) hold.
func (e *ChangelogLostError) Unwrap() error { return ErrChangelogBehind }

// ErrRecreatedDuringRestore: the changelog topic changed incarnation while
// a restore ran. The next attempt sees the new incarnation and wipes.
var ErrRecreatedDuringRestore = errors.New("state: changelog recreated during the restore; retry")

// incarnation reads the changelog topic's current incarnation from the
// brokers. Asking for authorized operations is kadm's way to bypass the
// client's metadata cache, which may still hold a deleted topic's ID.
func incarnation(ctx context.Context, admin *kadm.Client, topic string) (Incarnation, error) {
	md, err := admin.Metadata(kadm.WithAuthorizedOps(ctx), topic)
	if err != nil {
		return Incarnation{}, fmt.Errorf("state: metadata of changelog %s: %w", topic, err)
	}
	td, ok := md.Topics[topic]
	if !ok {
		return Incarnation{}, fmt.Errorf("state: metadata of changelog %s: topic not reported", topic)
	}
	if td.Err != nil {
		return Incarnation{}, fmt.Errorf("state: metadata of changelog %s: %w", topic, td.Err)
	}
	inc := Incarnation{Cluster: md.Cluster, TopicID: headers.TopicID(td.ID)}
	if inc.TopicID.IsZero() {
		return Incarnation{}, fmt.Errorf("%w: %s in cluster %q", ErrNoTopicID, topic, md.Cluster)
	}
	return inc, nil
}

// CurrentIncarnation reads the changelog topic's current incarnation from
// the brokers, bypassing the client's metadata cache: what a reader of
// the changelog outside a restore (a view) compares against the one it
// started on.
func CurrentIncarnation(ctx context.Context, admin *kadm.Client, topic string) (Incarnation, error) {
	return incarnation(ctx, admin, topic)
}
