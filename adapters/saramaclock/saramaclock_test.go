package saramaclock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/parsley-go/parsley/adapters/adaptertest"
	"github.com/parsley-go/parsley/adapters/saramaclock"
	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// client is a sarama producer and consumer with the adapter in between,
// written from the package's docs: the client's own configuration, the
// clock, and nothing else.
type client struct {
	producer sarama.SyncProducer
	consumer sarama.Consumer
	clk      *clock.Clock
	stamp    bool
}

func newClient(stamp bool) func(context.Context, []string) (adaptertest.Client, error) {
	return func(_ context.Context, addrs []string) (adaptertest.Client, error) {
		cfg := sarama.NewConfig()
		cfg.Producer.Return.Successes = true
		cfg.Producer.RequiredAcks = sarama.WaitForAll
		cfg.Producer.Partitioner = sarama.NewMurmur2Partitioner
		clk, err := saramaclock.New(addrs, cfg)
		if err != nil {
			return nil, err
		}
		producer, err := sarama.NewSyncProducer(addrs, cfg)
		if err != nil {
			clk.Close()
			return nil, err
		}
		consumer, err := sarama.NewConsumer(addrs, cfg)
		if err != nil {
			producer.Close()
			clk.Close()
			return nil, err
		}
		return &client{producer: producer, consumer: consumer, clk: clk, stamp: stamp}, nil
	}
}

func (c *client) Produce(ctx context.Context, topic string, key, value []byte) error {
	msg := &sarama.ProducerMessage{Topic: topic, Key: sarama.ByteEncoder(key), Value: sarama.ByteEncoder(value)}
	if !c.stamp {
		_, _, err := c.producer.SendMessage(msg)
		return err
	}
	_, _, err := saramaclock.SendMessage(ctx, c.clk, c.producer, msg)
	return err
}

func (c *client) Consume(ctx context.Context, topic string, n int, handle func(key, value []byte) error) error {
	parts, err := c.consumer.Partitions(topic)
	if err != nil {
		return err
	}
	msgs := make(chan *sarama.ConsumerMessage)
	for _, p := range parts {
		pc, err := c.consumer.ConsumePartition(topic, p, sarama.OffsetOldest)
		if err != nil {
			return err
		}
		defer pc.AsyncClose()
		go func() {
			for m := range pc.Messages() {
				select {
				case msgs <- m:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	for range n {
		var m *sarama.ConsumerMessage
		select {
		case m = <-msgs:
		case <-ctx.Done():
			return ctx.Err()
		}
		if c.stamp {
			if err := saramaclock.Observe(ctx, c.clk, m); err != nil {
				return err
			}
		}
		if err := handle(m.Key, m.Value); err != nil {
			return err
		}
	}
	return nil
}

func (c *client) Close() error {
	return errors.Join(c.consumer.Close(), c.producer.Close(), c.clk.Close())
}

func TestPipeline(t *testing.T) {
	adaptertest.Test(t, 100, newClient)
}

// TestMurmur2PartitionersAgreeWithKafka: sarama's own murmur2 partitioner
// and the deprecated saramaclock.Murmur2Partitioner place every key where
// franz-go (and so Kafka's Java client and a stage) does.
func TestMurmur2PartitionersAgreeWithKafka(t *testing.T) {
	kafka := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	partitioners := map[string]sarama.Partitioner{
		"sarama.NewMurmur2Partitioner":   sarama.NewMurmur2Partitioner("t"),
		"saramaclock.Murmur2Partitioner": saramaclock.Murmur2Partitioner("t"),
	}
	fnv := sarama.NewHashPartitioner("t")
	fnvDisagrees, placements := 0, 0
	for _, n := range []int32{1, 2, 3, 7, 12, 64} {
		for i := range 2000 {
			key := fmt.Appendf(nil, "key-%d", i)
			if i%97 == 0 {
				key = key[:i%4] // short keys exercise the hash's tail
			}
			want := int32(kafka.Partition(&kgo.Record{Key: key}, int(n)))
			msg := &sarama.ProducerMessage{Topic: "t", Key: sarama.ByteEncoder(key)}
			for name, p := range partitioners {
				got, err := p.Partition(msg, n)
				if err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("key %q over %d partitions: %s chose %d, Kafka's partitioner %d", key, n, name, got, want)
				}
			}
			if p, _ := fnv.Partition(msg, n); p != want {
				fnvDisagrees++
			}
			placements++
		}
	}
	// The reason to set one: sarama's default disagrees.
	if fnvDisagrees == 0 {
		t.Fatal("sarama's default partitioner agreed with murmur2 on every key; the comparison is vacuous")
	}
	t.Logf("both murmur2 partitioners agreed with Kafka's on %d of %d placements; sarama's default disagreed on %d", placements, placements, fnvDisagrees)
}

// describer answers DescribeTopics from a table.
type describer map[string]*sarama.TopicMetadata

func (d describer) DescribeTopics(topics []string) ([]*sarama.TopicMetadata, error) {
	var out []*sarama.TopicMetadata
	for _, t := range topics {
		if md, ok := d[t]; ok {
			out = append(out, md)
		} else {
			out = append(out, &sarama.TopicMetadata{Name: t, Err: sarama.ErrUnknownTopicOrPartition})
		}
	}
	return out, nil
}

func TestLookupAndForget(t *testing.T) {
	ctx := context.Background()
	d := describer{
		"orders": {Name: "orders", Uuid: sarama.Uuid{7}},
		"old":    {Name: "old"}, // a cluster that gives no topic ID
	}
	clk := clock.New(nil, clock.TopicIDs(saramaclock.Lookup(d)))

	msg := &sarama.ProducerMessage{Topic: "orders", Headers: []sarama.RecordHeader{{Key: []byte("trace"), Value: []byte("1")}}}
	if err := saramaclock.Stamp(ctx, clk, msg); err != nil {
		t.Fatal(err)
	}
	if len(msg.Headers) != 2 || string(msg.Headers[0].Key) != "trace" || string(msg.Headers[1].Key) != headers.HeaderVC {
		t.Fatalf("stamped headers %q; want the own header, then vc", msg.Headers)
	}
	if id, ok := clk.Resolver().Cached("orders"); !ok || id != (headers.TopicID{7}) {
		t.Fatalf("cached ID of orders = %v, %v; want the cluster's", id, ok)
	}

	var ute *clock.UnknownTopicError
	err := saramaclock.Stamp(ctx, clk, &sarama.ProducerMessage{Topic: "missing"})
	if !errors.As(err, &ute) || ute.Topic != "missing" || !errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
		t.Fatalf("stamp for a missing topic: %v; want an *UnknownTopicError naming it, wrapping sarama's error", err)
	}
	if err := saramaclock.Stamp(ctx, clk, &sarama.ProducerMessage{Topic: "old"}); !errors.Is(err, clock.ErrNoTopicID) {
		t.Fatalf("stamp on a cluster without topic IDs: %v; want ErrNoTopicID", err)
	}
	reserved := &sarama.ProducerMessage{Topic: "orders", Headers: []sarama.RecordHeader{{Key: []byte("parsley.x")}}}
	if err := saramaclock.Stamp(ctx, clk, reserved); !errors.Is(err, headers.ErrReservedHeader) || len(reserved.Headers) != 1 {
		t.Fatalf("stamp over a reserved header: %v, headers %q; want ErrReservedHeader and no change", err, reserved.Headers)
	}

	// sarama's unknown-topic error makes the clock forget the cached ID;
	// another error does not.
	saramaclock.Failed(clk, "orders", sarama.ErrNotEnoughReplicas)
	if _, ok := clk.Resolver().Cached("orders"); !ok {
		t.Fatal("a send failing for another reason dropped the cached topic ID")
	}
	saramaclock.Failed(clk, "orders", &sarama.ProducerError{Err: sarama.ErrUnknownTopicOrPartition})
	if _, ok := clk.Resolver().Cached("orders"); ok {
		t.Fatal("an unknown-topic send error left the cached topic ID in place")
	}
}

func TestObserveReadsConsumerHeaders(t *testing.T) {
	ctx := context.Background()
	clk := clock.New(nil, clock.TopicIDs(saramaclock.Lookup(describer{"orders": {Name: "orders", Uuid: sarama.Uuid{7}}, "payments": {Name: "payments", Uuid: sarama.Uuid{8}}})))
	var carried headers.Clock
	carried.SetOffset(headers.Channel{Topic: headers.TopicID{8}, Partition: 1}, 3)
	vc, err := headers.AppendVC(nil, &carried)
	if err != nil {
		t.Fatal(err)
	}
	in := &sarama.ConsumerMessage{Topic: "orders", Partition: 2, Offset: 9,
		Headers: []*sarama.RecordHeader{{Key: []byte("trace")}, nil, {Key: []byte(headers.HeaderVC), Value: vc}}}
	if err := saramaclock.Observe(ctx, clk, in); err != nil {
		t.Fatal(err)
	}
	st, err := saramaclock.ReadStamp(in)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := st.Clock.Offset(headers.Channel{Topic: headers.TopicID{8}, Partition: 1}); !ok || o != 3 {
		t.Fatalf("ReadStamp = %v, %v; want the carried claim", st, err)
	}
	snap := clk.Snapshot()
	if got, _ := snap.Offset(headers.Channel{Topic: headers.TopicID{7}, Partition: 2}); got != 9 {
		t.Fatalf("observed orders/2@9, clock claims %d there", got)
	}
	if got, _ := snap.Offset(headers.Channel{Topic: headers.TopicID{8}, Partition: 1}); got != 3 {
		t.Fatalf("observed a record claiming payments/1@3, clock claims %d there", got)
	}
	bad := &sarama.ConsumerMessage{Topic: "orders", Partition: 2, Offset: 10,
		Headers: []*sarama.RecordHeader{{Key: []byte(headers.HeaderVC), Value: []byte{1}}}}
	if err := saramaclock.Observe(ctx, clk, bad); !errors.Is(err, headers.ErrUndecodable) {
		t.Fatalf("observe of an undecodable stamp: %v; want ErrUndecodable", err)
	}
}

// TestAsyncProducerSuccessesFold: with an AsyncProducer, each message read
// from Successes carries its partition and offset, and Produced folds it,
// so the next stamp claims it.
func TestAsyncProducerSuccessesFold(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	fake, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "payments"))
	if err != nil {
		t.Fatal(err)
	}
	defer fake.Close()
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true
	cfg.Producer.Partitioner = sarama.NewMurmur2Partitioner
	clk, err := saramaclock.New(fake.ListenAddrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer clk.Close()
	p, err := sarama.NewAsyncProducer(fake.ListenAddrs(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	var acked *sarama.ProducerMessage
	for i := range 3 {
		msg := &sarama.ProducerMessage{Topic: "payments", Key: sarama.StringEncoder(fmt.Sprint("k", i)), Value: sarama.StringEncoder("v")}
		if err := saramaclock.Stamp(ctx, clk, msg); err != nil {
			t.Fatal(err)
		}
		if acked != nil {
			// This stamp claims the previous acknowledged send.
			st, err := clock.ReadStampSeq(func(yield func(string, []byte) bool) {
				h := msg.Headers[len(msg.Headers)-1]
				yield(string(h.Key), h.Value)
			})
			if err != nil {
				t.Fatal(err)
			}
			id, _ := clk.Resolver().Cached("payments")
			if o, ok := st.Clock.Offset(headers.Channel{Topic: id, Partition: acked.Partition}); !ok || o != acked.Offset {
				t.Fatalf("stamp after payments/%d@%d was acknowledged claims %d (%v) there", acked.Partition, acked.Offset, o, ok)
			}
		}
		p.Input() <- msg
		select {
		case acked = <-p.Successes():
		case pe := <-p.Errors():
			saramaclock.Failed(clk, pe.Msg.Topic, pe.Err)
			t.Fatal(pe.Err)
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		}
		if err := saramaclock.Produced(ctx, clk, acked); err != nil {
			t.Fatal(err)
		}
	}
}
