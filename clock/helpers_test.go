package clock_test

import (
	"context"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// cluster starts a broker whose shared client places records on the
// partition they name.
func cluster(t testing.TB, topics ...broker.Topic) *broker.Cluster {
	return broker.New(t, broker.Topics(topics...),
		broker.ClientOpts(kgo.RecordPartitioner(kgo.ManualPartitioner())))
}

// produce sends rec and waits for the acknowledgement.
func produce(t testing.TB, c *broker.Cluster, rec *kgo.Record) *kgo.Record {
	t.Helper()
	res := c.Client().ProduceSync(testCtx(t), rec)
	if err := res.FirstErr(); err != nil {
		t.Fatalf("produce to %q: %v", rec.Topic, err)
	}
	return res[0].Record
}

// consume reads the first n records of topic/partition with a fresh
// client, polling until they arrive or the test's deadline passes.
func consume(t testing.TB, c *broker.Cluster, topic string, partition int32, n int) []*kgo.Record {
	t.Helper()
	cl, err := c.NewClient(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		topic: {partition: kgo.NewOffset().AtStart()},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	return pollN(t, cl, n)
}

func pollN(t testing.TB, cl *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	ctx := testCtx(t)
	var recs []*kgo.Record
	for len(recs) < n {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("poll: have %d of %d records: %v", len(recs), n, err)
		}
		recs = append(recs, fs.Records()...)
	}
	return recs
}

func topicID(t testing.TB, c *broker.Cluster, name string) headers.TopicID {
	t.Helper()
	id, err := c.TopicID(testCtx(t), name)
	if err != nil {
		t.Fatal(err)
	}
	return headers.TopicID(id)
}

// claims decodes the clock a record carries, failing the test if it
// carries none or an undecodable one.
func claims(t testing.TB, rec *kgo.Record) *headers.Clock {
	t.Helper()
	var s headers.Stamp
	if err := headers.ReadStamp(&s, rec.Headers); err != nil {
		t.Fatalf("record %s/%d@%d: %v", rec.Topic, rec.Partition, rec.Offset, err)
	}
	stamped := false
	for _, h := range rec.Headers {
		if h.Key == headers.HeaderVC || h.Key == headers.HeaderCauses {
			stamped = true
		}
	}
	if !stamped {
		t.Fatalf("record %s/%d@%d carries no stamp", rec.Topic, rec.Partition, rec.Offset)
	}
	return s.Clock.Clone()
}

func ch(id headers.TopicID, p int32) headers.Channel { return headers.Channel{Topic: id, Partition: p} }

func wantOffset(t testing.TB, clk *headers.Clock, c headers.Channel, want int64) {
	t.Helper()
	got, ok := clk.Offset(c)
	if !ok || got != want {
		t.Errorf("claim on %s = %d (present %v), want %d", c, got, ok, want)
	}
}

// controlRecord commits a transaction to topic's partition 0 and returns
// its commit marker, as a consumer keeping control records sees it.
func controlRecord(t testing.TB, c *broker.Cluster, topic string) *kgo.Record {
	t.Helper()
	p, err := c.NewClient(kgo.TransactionalID("marker-"+topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(testCtx(t), &kgo.Record{Topic: topic}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := p.EndTransaction(testCtx(t), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	cl, err := c.NewClient(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := testCtx(t)
	for {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		for _, r := range fs.Records() {
			if r.Attrs.IsControl() {
				return r
			}
		}
	}
}
