package kafkagoclock_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parsley-go/parsley/adapters/adaptertest"
	"github.com/parsley-go/parsley/adapters/kafkagoclock"
	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// cluster is an embedded broker with two-partition topics, and a franz-go
// admin client on it for the test's own looking.
func cluster(t *testing.T, topics ...string) ([]string, *kadm.Client) {
	t.Helper()
	addrs, adm, _ := fakeCluster(t, topics...)
	return addrs, adm
}

func fakeCluster(t *testing.T, topics ...string) ([]string, *kadm.Client, *kfake.Cluster) {
	t.Helper()
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, topics...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fake.Close)
	cl, err := kgo.NewClient(kgo.SeedBrokers(fake.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return fake.ListenAddrs(), kadm.NewClient(cl), fake
}

func writer(brokers []string, next func([]kafka.Message, error)) *kafka.Writer {
	return &kafka.Writer{
		Addr:         kafka.TCP(brokers...),
		Balancer:     &kafka.Murmur2Balancer{},
		BatchSize:    1,
		RequiredAcks: kafka.RequireAll,
		Completion:   kafkagoclock.Completion(next),
	}
}

// TestWriteMessageFolds: each WriteMessage returns where the message went,
// sets it in the message, and the next stamp claims it; the Writer's own
// callback still sees every message with its own WriterData.
func TestWriteMessageFolds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	brokers, _ := cluster(t, "payments")
	clk, err := kafkagoclock.New(brokers)
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int32
	w := writer(brokers, func(msgs []kafka.Message, err error) {
		for _, m := range msgs {
			if m.WriterData != "mine" || err != nil {
				t.Errorf("the Writer's own callback got WriterData %v, error %v; want its own and none", m.WriterData, err)
			}
			seen.Add(1)
		}
	})
	defer w.Close()
	var prev headers.Coordinate
	for i, key := range []string{"a", "b", "c", "d"} {
		msg := kafka.Message{Topic: "payments", Key: []byte(key), Value: []byte("v"), WriterData: "mine"}
		partition, offset, err := kafkagoclock.WriteMessage(ctx, clk, w, &msg)
		if err != nil {
			t.Fatal(err)
		}
		if msg.Partition != int(partition) || msg.Offset != offset || msg.WriterData != "mine" {
			t.Fatalf("write %d returned %d@%d; the message says %d@%d, WriterData %v", i, partition, offset, msg.Partition, msg.Offset, msg.WriterData)
		}
		id, _ := clk.Resolver().Cached("payments")
		st, err := kafkagoclock.ReadStamp(&msg)
		if err != nil {
			t.Fatal(err)
		}
		if i > 0 {
			// The stamp claims the previous write.
			if o, ok := st.Clock.Offset(headers.Channel{Topic: id, Partition: prev.Partition}); !ok || o < prev.Offset {
				t.Fatalf("write %d claims payments/%d@%d (%v); want at least the previous write's %d", i, prev.Partition, o, ok, prev.Offset)
			}
		}
		prev = headers.Coordinate{Channel: headers.Channel{Topic: id, Partition: partition}, Offset: offset}
		if o, ok := clk.Snapshot().Offset(headers.Channel{Topic: id, Partition: partition}); !ok || o != offset {
			t.Fatalf("after writing payments/%d@%d the clock claims %d (%v) there", partition, offset, o, ok)
		}
	}
	if seen.Load() != 4 {
		t.Fatalf("the Writer's own callback saw %d messages; want 4", seen.Load())
	}
}

// TestWriteMessageFailsWhenTheFoldFails: the stamp's lookup succeeds, the
// fold's fails. The error reaches the call site as a *clock.NotFoldedError
// naming where the message was written, and the clock claims nothing.
func TestWriteMessageFailsWhenTheFoldFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	brokers, adm := cluster(t, "payments")
	clk, err := kafkagoclock.New(brokers,
		clock.TopicIDs(adaptertest.FailLookupsAfter(1, clock.AdminLookup(adm))),
		clock.TopicIDMaxAge(time.Nanosecond)) // every resolve asks the lookup
	if err != nil {
		t.Fatal(err)
	}
	defer clk.Close()
	w := writer(brokers, nil)
	defer w.Close()
	msg := kafka.Message{Topic: "payments", Key: []byte("k"), Value: []byte("v")}
	partition, offset, err := kafkagoclock.WriteMessage(ctx, clk, w, &msg)
	var nf *clock.NotFoldedError
	if !errors.As(err, &nf) || !errors.Is(err, adaptertest.ErrInjected) {
		t.Fatalf("WriteMessage with a failing fold: %v; want a *clock.NotFoldedError wrapping the lookup's error", err)
	}
	if offset != 0 || nf.Topic != "payments" || nf.Partition != partition || nf.Offset != 0 {
		t.Fatalf("WriteMessage returned %d@%d, error names %q/%d@%d; want the written payments/%d@0", partition, offset, nf.Topic, nf.Partition, nf.Offset, partition)
	}
	if !clk.Snapshot().IsEmpty() {
		t.Fatalf("the clock claims %v after a failed fold", clk.Snapshot())
	}
}

// TestWriteMessageRefusesWritersItCannotFold: a Writer that would write
// without reporting offsets, or whose Completion is a callback of its own,
// is refused before anything is written, and so is a transaction's clock.
func TestWriteMessageRefusesWritersItCannotFold(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	brokers, adm := cluster(t, "payments")
	clk, err := kafkagoclock.New(brokers)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		setting string
		set     func(*kafka.Writer)
	}{
		{"Async", func(w *kafka.Writer) { w.Async = true }},
		{"RequireNone", func(w *kafka.Writer) { w.RequiredAcks = kafka.RequireNone }},
		{"Completion", func(w *kafka.Writer) { w.Completion = func([]kafka.Message, error) {} }},
	} {
		w := writer(brokers, nil)
		tc.set(w)
		msg := kafka.Message{Topic: "payments", Value: []byte("v")}
		if _, _, err := kafkagoclock.WriteMessage(ctx, clk, w, &msg); !errors.Is(err, kafkagoclock.ErrWriter) || !strings.Contains(err.Error(), tc.setting) {
			t.Errorf("writer with %s: %v; want ErrWriter naming it", tc.setting, err)
		}
		if len(msg.Headers) != 0 {
			t.Errorf("writer with %s: the refused message was stamped", tc.setting)
		}
		w.Close()
	}
	tx := clk.Begin()
	w := writer(brokers, nil)
	defer w.Close()
	msg := kafka.Message{Topic: "payments", Value: []byte("v")}
	if _, _, err := kafkagoclock.WriteMessage(ctx, tx.Clock(), w, &msg); !errors.Is(err, clock.ErrTxnClock) || len(msg.Headers) != 0 {
		t.Errorf("WriteMessage through a transaction's clock: %v; want ErrTxnClock, nothing stamped", err)
	}
	tx.Aborted()
	ends, err := adm.ListEndOffsets(ctx, "payments")
	if err != nil {
		t.Fatal(err)
	}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset != 0 {
			t.Errorf("a refused writer wrote to payments/%d", o.Partition)
		}
	})
}

// TestWriteMessageSetsTheCompletion: a Writer without a Completion, as the
// docs build it, gets the adapter's at its first WriteMessage, and the
// write is folded.
func TestWriteMessageSetsTheCompletion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	brokers, _ := cluster(t, "payments")
	clk, err := kafkagoclock.New(brokers)
	if err != nil {
		t.Fatal(err)
	}
	w := &kafka.Writer{Addr: kafka.TCP(brokers...), Balancer: &kafka.Murmur2Balancer{}, BatchSize: 1, RequiredAcks: kafka.RequireAll}
	defer w.Close()
	for range 2 {
		msg := kafka.Message{Topic: "payments", Key: []byte("k"), Value: []byte("v")}
		partition, offset, err := kafkagoclock.WriteMessage(ctx, clk, w, &msg)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := clk.Resolver().Cached("payments")
		if o, ok := clk.Snapshot().Offset(headers.Channel{Topic: id, Partition: partition}); !ok || o != offset {
			t.Fatalf("after writing payments/%d@%d the clock claims %d (%v) there", partition, offset, o, ok)
		}
	}
	if w.Completion == nil {
		t.Fatal("WriteMessage left the Writer without a Completion")
	}
}

// TestFailedWriteLeavesTheMessageUnstamped: a write the Writer refuses
// folds nothing and leaves the message as it was, so it can be written
// again.
func TestFailedWriteLeavesTheMessageUnstamped(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	brokers, _ := cluster(t, "payments")
	clk, err := kafkagoclock.New(brokers)
	if err != nil {
		t.Fatal(err)
	}
	w := writer(brokers, nil)
	w.BatchBytes = 64
	defer w.Close()
	msg := kafka.Message{Topic: "payments", Value: make([]byte, 100), Headers: []kafka.Header{{Key: "trace", Value: []byte("1")}}}
	if _, _, err := kafkagoclock.WriteMessage(ctx, clk, w, &msg); err == nil {
		t.Fatal("a message larger than BatchBytes was written")
	}
	if len(msg.Headers) != 1 || !clk.Snapshot().IsEmpty() {
		t.Fatalf("after a failed write the message has headers %v and the clock claims %v; want its own header and nothing", msg.Headers, clk.Snapshot())
	}
	w.BatchBytes = 0
	if _, _, err := kafkagoclock.WriteMessage(ctx, clk, w, &msg); err != nil {
		t.Fatalf("writing the message again: %v", err)
	}
}

func TestStampAndObserve(t *testing.T) {
	ctx := context.Background()
	ids := map[string]headers.TopicID{"orders": {4}, "payments": {5}}
	clk := clock.New(nil, clock.TopicIDs(func(_ context.Context, topic string) (headers.TopicID, error) {
		if id, ok := ids[topic]; ok {
			return id, nil
		}
		return headers.TopicID{}, &clock.UnknownTopicError{Topic: topic}
	}))
	in := kafka.Message{Topic: "orders", Partition: 1, Offset: 6}
	if err := kafkagoclock.Observe(ctx, clk, &in); err != nil {
		t.Fatal(err)
	}
	out := kafka.Message{Topic: "payments"}
	if err := kafkagoclock.Stamp(ctx, clk, &out); err != nil {
		t.Fatal(err)
	}
	st, err := kafkagoclock.ReadStamp(&out)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := st.Clock.Offset(headers.Channel{Topic: headers.TopicID{4}, Partition: 1}); !ok || o != 6 {
		t.Fatalf("the stamp claims orders/1@%d (%v); want the observed 6", o, ok)
	}
	var ute *clock.UnknownTopicError
	if err := kafkagoclock.Observe(ctx, clk, &kafka.Message{Topic: "gone"}); !errors.As(err, &ute) || ute.Topic != "gone" {
		t.Fatalf("observing a message of a topic that does not resolve: %v; want an *UnknownTopicError naming it", err)
	}
	msg := kafka.Message{Value: []byte("x")}
	if err := kafkagoclock.Stamp(ctx, clk, &msg); !errors.Is(err, kafkagoclock.ErrNoTopic) {
		t.Fatalf("stamp without a topic: %v; want ErrNoTopic", err)
	}
	msg = kafka.Message{Topic: "payments", Headers: []kafka.Header{{Key: "vc-seq"}}}
	if err := kafkagoclock.Stamp(ctx, clk, &msg); !errors.Is(err, headers.ErrReservedHeader) || len(msg.Headers) != 1 {
		t.Fatalf("stamp over a reserved header: %v; want ErrReservedHeader and no change", err)
	}
	tx := clk.Begin()
	msg = kafka.Message{Topic: "payments"}
	if err := kafkagoclock.Stamp(ctx, tx.Clock(), &msg); !errors.Is(err, clock.ErrTxnClock) || len(msg.Headers) != 0 {
		t.Fatalf("stamp through a transaction's clock: %v; want ErrTxnClock and no change", err)
	}
	if err := tx.Clock().Produced(ctx, "orders", 0, 3); err != nil {
		t.Fatal(err)
	}
	var ote *clock.OpenTxnError
	if err := kafkagoclock.Stamp(ctx, clk, &msg); !errors.As(err, &ote) || len(msg.Headers) != 0 {
		t.Fatalf("stamp while a transaction holds a send: %v; want an *OpenTxnError and no change", err)
	}
}

// TestUnknownTopicWriteForgetsTheTopicID: the broker refuses a write with
// UNKNOWN_TOPIC_OR_PARTITION (the topic was deleted under the writer).
// WriteMessage returns that error, folds nothing, and the clock forgets the
// topic's cached ID so the next stamp looks up the current incarnation.
func TestUnknownTopicWriteForgetsTheTopicID(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	brokers, _, fake := fakeCluster(t, "payments")
	clk, err := kafkagoclock.New(brokers)
	if err != nil {
		t.Fatal(err)
	}
	w := writer(brokers, nil)
	w.MaxAttempts = 1 // the error is retriable; fail at once
	defer w.Close()
	fake.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		preq := req.(*kmsg.ProduceRequest)
		resp := preq.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range preq.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	msg := kafka.Message{Topic: "payments", Key: []byte("k"), Value: []byte("v")}
	if _, _, err := kafkagoclock.WriteMessage(ctx, clk, w, &msg); !errors.Is(err, kafka.UnknownTopicOrPartition) {
		t.Fatalf("a write the broker refused as an unknown topic: %v; want kafka.UnknownTopicOrPartition", err)
	}
	if _, ok := clk.Resolver().Cached("payments"); ok {
		t.Fatal("an unknown-topic write error left the cached topic ID in place")
	}
	if !clk.Snapshot().IsEmpty() || len(msg.Headers) != 0 {
		t.Fatalf("after the refused write the clock claims %v and the message has headers %v; want neither", clk.Snapshot(), msg.Headers)
	}
}
