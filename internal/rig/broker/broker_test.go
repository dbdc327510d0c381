package broker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestRoundTripAcrossBrokers(t *testing.T) {
	c := broker.New(t, broker.Brokers(3), broker.ClientOpts(kgo.RecordPartitioner(kgo.ManualPartitioner())), broker.Topics(
		broker.Topic{Name: "in", Partitions: 3},
		broker.Topic{Name: "compacted", Partitions: 1, Configs: map[string]*string{"cleanup.policy": new("compact")}},
	))
	if n := len(c.Addrs()); n != 3 && !broker.Real() {
		t.Fatalf("%d listen addresses, want 3", n)
	}
	md, err := c.Admin().Metadata(ctx(t), "in", "compacted")
	if err != nil {
		t.Fatal(err)
	}
	if p := len(md.Topics["in"].Partitions); p != 3 {
		t.Fatalf("topic in has %d partitions, want 3", p)
	}
	for name, td := range md.Topics {
		if td.ID == [16]byte{} {
			t.Errorf("topic %s has the zero topic ID", name)
		}
	}
	rc, err := c.Admin().DescribeTopicConfigs(ctx(t), "compacted")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := rc.On("compacted", nil)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, kv := range cfg.Configs {
		if kv.Key == "cleanup.policy" && kv.MaybeValue() == "compact" {
			found = true
		}
	}
	if !found {
		t.Errorf("topic compacted lacks cleanup.policy=compact: %v", cfg.Configs)
	}

	res := c.Client().ProduceSync(ctx(t),
		&kgo.Record{Topic: "in", Partition: 2, Value: []byte("a")},
		&kgo.Record{Topic: "in", Partition: 2, Value: []byte("b")})
	if err := res.FirstErr(); err != nil {
		t.Fatal(err)
	}
	if got := res[1].Record.Offset; got != 1 {
		t.Fatalf("second record at offset %d, want 1", got)
	}

	cons, err := c.NewClient(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		"in": {2: kgo.NewOffset().AtStart()},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var got []string
	for len(got) < 2 {
		fs := cons.PollFetches(ctx(t))
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	if got[0] != "a" || got[1] != "b" {
		t.Fatalf("consumed %q, want [a b]", got)
	}
}

func TestRecreatedTopicGetsNewID(t *testing.T) {
	c := broker.New(t, broker.Topics(broker.Topic{Name: "x"}))
	before, err := c.TopicID(ctx(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteTopics(ctx(t), "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.TopicID(ctx(t), "x"); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("deleted topic: err = %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	if err := c.CreateTopics(ctx(t), broker.Topic{Name: "x"}); err != nil {
		t.Fatal(err)
	}
	after, err := c.TopicID(ctx(t), "x")
	if err != nil {
		t.Fatal(err)
	}
	if after == before || after == [16]byte{} {
		t.Fatalf("recreated topic ID %x, old %x: want a new non-zero ID", after, before)
	}
}

func TestErrorsNameTheTopic(t *testing.T) {
	c := broker.New(t, broker.Topics(broker.Topic{Name: "dup"}))
	err := c.CreateTopics(ctx(t), broker.Topic{Name: "dup"})
	if !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatalf("create existing topic: err = %v, want TOPIC_ALREADY_EXISTS", err)
	}
	if want := `"dup"`; !contains(err.Error(), want) {
		t.Errorf("error %q does not name %s", err, want)
	}
	if err := c.DeleteTopics(ctx(t), "nope"); err == nil || !contains(err.Error(), `"nope"`) {
		t.Errorf("delete missing topic: err = %v, want an error naming it", err)
	}
	if _, err := broker.Start(ctx(t), broker.Brokers(0)); err == nil {
		t.Error("Start with zero brokers succeeded")
	}
}

func TestTransactionsWriteControlRecords(t *testing.T) {
	c := broker.New(t, broker.Topics(broker.Topic{Name: "tx"}))
	p, err := c.NewClient(kgo.TransactionalID("tx-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := p.ProduceSync(ctx(t), &kgo.Record{Topic: "tx", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := p.EndTransaction(ctx(t), kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	cons, err := c.NewClient(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"tx": {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	var data, control int
	for data+control < 2 {
		fs := cons.PollFetches(ctx(t))
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			if r.Attrs.IsControl() {
				control++
				if r.Offset != 1 {
					t.Errorf("commit marker at offset %d, want 1", r.Offset)
				}
			} else {
				data++
			}
		})
	}
	if data != 1 || control != 1 {
		t.Fatalf("%d data and %d control records, want 1 and 1", data, control)
	}
}

func TestCloseTwice(t *testing.T) {
	c, err := broker.Start(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	c.Close()
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
