package observer_test

import (
	"fmt"
	"hash/fnv"
	"strings"
	"testing"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/observer"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestCrossPartitionCause: orders written with murmur2, and for each a
// payment stamped with the order as its cause by a second producer. With
// sarama's default partitioner (FNV-1a) most payments sit on another
// partition than their order and the observer reports the pattern once for
// the topic pair, with its count and likely cause; with murmur2 it reports
// nothing, though every payment claims orders on other partitions too.
func TestCrossPartitionCause(t *testing.T) {
	fnvPartitioner := kgo.StickyKeyPartitioner(kgo.SaramaHasher(func(b []byte) uint32 {
		h := fnv.New32a()
		h.Write(b)
		return h.Sum32()
	}))
	for _, tc := range []struct {
		name        string
		partitioner kgo.Partitioner
		report      bool
	}{
		{"murmur2", kgo.StickyKeyPartitioner(nil), false},
		{"sarama-fnv", fnvPartitioner, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxFor(t)
			c := broker.New(t, broker.Topics(broker.Topic{Name: "orders", Partitions: 4}, broker.Topic{Name: "payments", Partitions: 4}))
			payer, err := c.NewClient(kgo.RecordPartitioner(tc.partitioner))
			if err != nil {
				t.Fatal(err)
			}
			defer payer.Close()
			clk := clock.New(c.Admin())
			misplaced := 0
			for i := range 16 {
				var at [2]int32
				for j, cl := range []*kgo.Client{c.Client(), payer} {
					rec := &kgo.Record{Topic: []string{"orders", "payments"}[j], Key: fmt.Appendf(nil, "order-%d", i), Value: []byte("v")}
					if err := clk.Stamp(ctx, rec); err != nil {
						t.Fatal(err)
					}
					if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
						t.Fatal(err)
					}
					if err := clk.RecordProduced(rec); err != nil {
						t.Fatal(err)
					}
					at[j] = rec.Partition
				}
				if at[0] != at[1] {
					misplaced++
				}
			}
			if tc.report != (misplaced > 0) {
				t.Fatalf("%d payments on another partition than their order; the case is vacuous", misplaced)
			}
			_, o := scan(t, ctx, c)
			var got []observer.Finding
			for _, f := range findings(t, ctx, o) {
				if f.Code == observer.CodeCrossPartitionCause {
					got = append(got, f)
				}
			}
			if !tc.report {
				if len(got) != 0 {
					t.Fatalf("murmur2 producers: %v; want no cross-partition-cause finding", got)
				}
				return
			}
			var pair *observer.Finding
			for i := range got {
				if got[i].Topic == "payments" && strings.Contains(got[i].Summary, `of topic "orders"`) {
					if pair != nil {
						t.Fatalf("two findings for the pair (payments, orders): %v", got)
					}
					pair = &got[i]
				}
			}
			if pair == nil {
				t.Fatalf("no finding for payments claiming orders across partitions: %v", got)
			}
			if pair.Count < 2 || len(pair.Coordinates) != 2 || pair.Severity != observer.SeverityWarning {
				t.Errorf("finding %s: count %d, coordinates %v; want a warning naming both coordinates, counted per record", pair, pair.Count, pair.Coordinates)
			}
			for _, want := range []string{"murmur2", "keyed differently"} {
				if !strings.Contains(pair.Summary, want) {
					t.Errorf("summary %q does not mention %q", pair.Summary, want)
				}
			}
		})
	}
}

// TestCrossPartitionCauseSkipsStageSends: a record with a sender tag was
// sent by a stage, which places keyed records with murmur2 and its ticks
// on the task's partition by design; a tick's key does not hash to its
// partition, and that is no producer's mistake. An untagged record placed
// the same way is reported.
func TestCrossPartitionCauseSkipsStageSends(t *testing.T) {
	ctx := ctxFor(t)
	c := broker.New(t, broker.Topics(broker.Topic{Name: "orders", Partitions: 2}, broker.Topic{Name: "ticks", Partitions: 2}),
		broker.ClientOpts(kgo.RecordPartitioner(kgo.ManualPartitioner())))
	cause := &kgo.Record{Topic: "orders", Partition: 0, Value: []byte("v")}
	if err := c.Client().ProduceSync(ctx, cause).FirstErr(); err != nil {
		t.Fatal(err)
	}
	id, err := c.TopicID(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	murmur2 := kgo.StickyKeyPartitioner(nil).ForTopic("")
	var key []byte // a key murmur2 places on partition 0, written to partition 1
	for i := 0; key == nil; i++ {
		if k := fmt.Appendf(nil, "k%d", i); murmur2.Partition(&kgo.Record{Key: k}, 2) == 0 {
			key = k
		}
	}
	for _, tagged := range []bool{true, false} {
		st := &headers.Stamp{Tagged: tagged, Sender: headers.SenderID{1}, Seq: 0}
		st.Clock.SetOffset(headers.Channel{Topic: headers.TopicID(id), Partition: 0}, cause.Offset)
		hs, err := headers.AppendStamp([]kgo.RecordHeader(nil), st, headers.DialectVC)
		if err != nil {
			t.Fatal(err)
		}
		rec := &kgo.Record{Topic: "ticks", Partition: 1, Key: key, Value: []byte("v"), Headers: hs}
		if err := c.Client().ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	_, o := scan(t, ctx, c)
	var got []observer.Finding
	for _, f := range findings(t, ctx, o) {
		if f.Code == observer.CodeCrossPartitionCause {
			got = append(got, f)
		}
	}
	if len(got) != 1 || got[0].Count != 1 || !strings.HasSuffix(got[0].Coordinates[0], "/1@1") {
		t.Fatalf("findings %v; want one, for the untagged record ticks/1@1 only", got)
	}
}
