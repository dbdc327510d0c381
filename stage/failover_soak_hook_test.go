package stage

import (
	"testing"

	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kgo"
)

// SoakView is what the failover soak hands the view checker of
// failover_soak_view_test.go. The checker lives in package stage_test
// because it needs package view, which imports stage; it registers itself
// in FailoverSoakView from an init function.
type SoakView struct {
	Brokers    []string
	App, Stage string
	// Input is the ID of the stage's input topic, "in": the channel of the
	// tokens the checker's writer takes.
	Input      headers.TopicID
	Partitions int
	NewClient  func(opts ...kgo.Opt) (*kgo.Client, error)
	// Produced adds records the checker's writer produced (offsets set) to
	// the soak's ground truth, so the exactly-once oracle covers them too.
	Produced func(recs []*kgo.Record)
	// Key returns base, or base with a suffix, whose default-partitioner
	// partition is p: a key whose state a view finds in task p.
	Key func(base string, p int32, n int) string
	// Dir is a directory for a view's state files.
	Dir string
}

// FailoverSoakView, when set, starts views over the soak stage's changelog
// and a token writer and readers; stop ends the writer and readers once the
// soak stops producing, and check, called once every stage process has
// stopped, judges what they read against the committed changelog.
var FailoverSoakView func(t *testing.T, cfg SoakView) (stop, check func())
