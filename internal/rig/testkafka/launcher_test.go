package testkafka

import (
	"context"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// checkLauncher drives l through the Launcher vocabulary only, as a soak
// taking either launcher does: it creates a topic of two partitions, finds
// both with a leader, and writes to and reads back from each.
func checkLauncher(ctx context.Context, t *testing.T, l broker.Launcher) {
	t.Helper()
	const topic = "launcher-vocabulary"
	if err := l.CreateTopics(ctx, broker.Topic{Name: topic, Partitions: 2}); err != nil {
		t.Fatal(err)
	}
	cl, err := l.NewClient(kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	md, err := kadm.NewClient(cl).Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(md.Topics[topic].Partitions); n != 2 {
		t.Fatalf("topic %s has %d partitions, want 2", topic, n)
	}
	for p := range int32(2) {
		if err := cl.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte{byte(p)}}).FirstErr(); err != nil {
			t.Fatalf("produce to partition %d: %v", p, err)
		}
	}
	seen := map[int32]bool{}
	for len(seen) < 2 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read back %v of 2 partitions: %v", seen, err)
		}
		fs.EachRecord(func(r *kgo.Record) { seen[r.Partition] = true })
	}
}

// TestEmbeddedClusterSpeaksTheLauncherVocabulary: the embedded broker runs
// what the real cluster runs in TestKillLeaderThenRestart, through the
// same interface, and closes twice without an error.
func TestEmbeddedClusterSpeaksTheLauncherVocabulary(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := broker.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var l broker.Launcher = c
	checkLauncher(ctx, t, l)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
