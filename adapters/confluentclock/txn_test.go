package confluentclock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/parsley-go/parsley/adapters/adaptertest"
	"github.com/parsley-go/parsley/adapters/confluentclock"
	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// cluster is an embedded broker with one-partition topics, or the
// real-Kafka tier's cluster when PARSLEY_TEST_BROKERS names one
// (docs/testing.md), and a franz-go client on it for the test's own
// looking.
func cluster(t *testing.T, topics ...string) ([]string, *kgo.Client) {
	t.Helper()
	var ts []broker.Topic
	for _, name := range topics {
		ts = append(ts, broker.Topic{Name: name})
	}
	c := broker.New(t, broker.Topics(ts...))
	return c.Addrs(), c.Client()
}

func producer(t *testing.T, conf kafka.ConfigMap) *kafka.Producer {
	t.Helper()
	conf["acks"] = "all"
	conf["linger.ms"] = 0
	p, err := kafka.NewProducer(&conf)
	if err != nil {
		t.Fatal(err)
	}
	go drainEvents(p)
	t.Cleanup(p.Close)
	return p
}

// TestProduceWritesTheReportBack: Produce returns the delivery's partition
// and offset and leaves them in the message, where a caller would look.
// When the fold fails the error reaches the call site as a
// *clock.NotFoldedError naming the delivered coordinate.
func TestProduceWritesTheReportBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addrs, cl := cluster(t, "payments")
	conf := kfakeConf(addrs)
	p := producer(t, conf)
	clk, err := confluentclock.New(p)
	if err != nil {
		t.Fatal(err)
	}
	topic := "payments"
	for want := int64(0); want < 2; want++ {
		msg := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Value: []byte("v")}
		partition, offset, err := confluentclock.Produce(ctx, clk, p, msg)
		if err != nil {
			t.Fatal(err)
		}
		if partition != 0 || offset != want || msg.TopicPartition.Partition != 0 || int64(msg.TopicPartition.Offset) != want || msg.TopicPartition.Error != nil {
			t.Fatalf("Produce returned %d@%d, message shows %v; want payments/0@%d in both", partition, offset, msg.TopicPartition, want)
		}
	}

	failing, err := confluentclock.New(p,
		clock.TopicIDs(adaptertest.FailLookupsAfter(1, clock.AdminLookup(kadm.NewClient(cl)))),
		clock.TopicIDMaxAge(time.Nanosecond)) // every resolve asks the lookup
	if err != nil {
		t.Fatal(err)
	}
	msg := &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Value: []byte("v")}
	partition, offset, err := confluentclock.Produce(ctx, failing, p, msg)
	var nf *clock.NotFoldedError
	if !errors.As(err, &nf) || !errors.Is(err, adaptertest.ErrInjected) {
		t.Fatalf("Produce with a failing fold: %v; want a *clock.NotFoldedError wrapping the lookup's error", err)
	}
	if partition != 0 || offset != 2 || nf.Topic != topic || nf.Partition != 0 || nf.Offset != 2 || msg.TopicPartition.Offset != 2 {
		t.Fatalf("Produce returned %d@%d, error names %q/%d@%d, message %v; want the delivered payments/0@2", partition, offset, nf.Topic, nf.Partition, nf.Offset, msg.TopicPartition)
	}
	if !failing.Snapshot().IsEmpty() {
		t.Fatalf("the clock claims %v after a failed fold", failing.Snapshot())
	}
}

// TestTxnAbortIsNeverClaimed: a transactional producer and a plain one
// share a clock. The plain send made while the transaction is open but
// before it sent anything is claimed by the transaction's send and stays
// claimed after the abort; once the transaction holds a send, a plain send
// is refused; the aborted send is never claimed, and a committed
// transaction's send is claimed once it commits.
func TestTxnAbortIsNeverClaimed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addrs, _ := cluster(t, "ledger", "audit")
	plain := producer(t, kfakeConf(addrs))
	tconf := kfakeConf(addrs)
	tconf["transactional.id"] = "ledger-writer"
	transactional := producer(t, tconf)
	if err := transactional.InitTransactions(ctx); err != nil {
		t.Fatal(err)
	}
	clk, err := confluentclock.New(transactional) // lookups through the transactional producer
	if err != nil {
		t.Fatal(err)
	}

	send := func(topic string) *kafka.Message {
		return &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}, Value: []byte(topic)}
	}
	claimsOf := func(c *clock.Clock, topic string) (int64, bool) {
		t.Helper()
		id, ok := clk.Resolver().Cached(topic)
		if !ok {
			t.Fatalf("topic %q not resolved", topic)
		}
		return c.Snapshot().Offset(headers.Channel{Topic: id})
	}
	claims := func(topic string) (int64, bool) { t.Helper(); return claimsOf(clk, topic) }

	tx, err := confluentclock.BeginTransaction(clk, transactional)
	if err != nil {
		t.Fatal(err)
	}
	_, plainAt, err := confluentclock.Produce(ctx, clk, plain, send("audit"))
	if err != nil {
		t.Fatalf("a plain send while the transaction holds nothing: %v", err)
	}
	_, aborted, err := tx.Produce(ctx, send("ledger"))
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := claimsOf(tx.Clock(), "audit"); !ok || o != plainAt {
		t.Fatalf("the transaction's clock claims audit@%d (%v); want the plain send at %d, made after it began", o, ok, plainAt)
	}
	if o, ok := claims("ledger"); ok {
		t.Fatalf("while the transaction is open the clock claims ledger@%d", o)
	}
	refused := send("audit")
	if _, _, err := confluentclock.Produce(ctx, clk, plain, refused); !errors.Is(err, clock.ErrOpenTxn) || len(refused.Headers) != 0 {
		t.Fatalf("a plain send while the transaction holds ledger@%d: %v, headers %v; want ErrOpenTxn and the message untouched", aborted, err, refused.Headers)
	}
	if _, _, err := confluentclock.Produce(ctx, tx.Clock(), transactional, send("ledger")); !errors.Is(err, clock.ErrTxnClock) {
		t.Fatalf("Produce through the transaction's clock: %v; want ErrTxnClock", err)
	}
	if err := tx.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tx.Produce(ctx, send("ledger")); !errors.Is(err, confluentclock.ErrTxnDone) {
		t.Fatalf("produce through an aborted Txn: %v; want ErrTxnDone", err)
	}
	if o, ok := claims("ledger"); ok {
		t.Fatalf("after the abort the clock claims ledger@%d (the aborted send was at %d)", o, aborted)
	}
	if o, ok := claims("audit"); !ok || o != plainAt {
		t.Fatalf("after the abort the clock claims audit@%d (%v); want the plain send at %d", o, ok, plainAt)
	}

	tx, err = confluentclock.BeginTransaction(clk, transactional)
	if err != nil {
		t.Fatal(err)
	}
	_, committed, err := tx.Produce(ctx, send("ledger"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if o, ok := claims("ledger"); !ok || o != committed {
		t.Fatalf("after the commit the clock claims ledger@%d (%v); want the committed send at %d", o, ok, committed)
	}
	if o, _ := claims("audit"); o != plainAt {
		t.Fatalf("the commit moved the plain claim to audit@%d; want %d", o, plainAt)
	}

	// The broker agrees: read_committed, the ledger holds the committed
	// send only.
	rc, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("ledger"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	fs := rc.PollFetches(ctx)
	if err := fs.Err0(); err != nil {
		t.Fatal(err)
	}
	if recs := fs.Records(); len(recs) != 1 || recs[0].Offset != committed {
		t.Fatalf("read_committed the ledger holds %d records; want only the committed one at %d", len(recs), committed)
	}
}

// fakeTxnProducer is a transactional producer whose abort fails, counting
// commits.
type fakeTxnProducer struct {
	swallow
	commits int
}

func (*fakeTxnProducer) BeginTransaction() error { return nil }
func (f *fakeTxnProducer) CommitTransaction(context.Context) error {
	f.commits++
	return nil
}
func (*fakeTxnProducer) AbortTransaction(context.Context) error {
	return kafka.NewError(kafka.ErrTimedOut, "abort timed out", false)
}

// TestCommitAfterAFailedAbortIsRefused: an abort drops the transaction's
// sends from the clock even when the client's abort fails, so a commit
// after it would commit sends no stamp claims; it is refused without
// reaching the client, and Abort may be retried.
func TestCommitAfterAFailedAbortIsRefused(t *testing.T) {
	ctx := context.Background()
	clk := clock.New(nil, clock.TopicIDs(func(context.Context, string) (headers.TopicID, error) { return headers.TopicID{9}, nil }))
	p := &fakeTxnProducer{swallow: swallow{deliver: true}}
	tx, err := confluentclock.BeginTransaction(clk, p)
	if err != nil {
		t.Fatal(err)
	}
	topic := "ledger"
	if _, _, err := tx.Produce(ctx, &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic, Partition: kafka.PartitionAny}}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Abort(ctx); err == nil {
		t.Fatal("the failing abort reported success")
	}
	if err := tx.Commit(ctx); !errors.Is(err, confluentclock.ErrTxnDone) || p.commits != 0 {
		t.Fatalf("Commit after a failed abort: %v, %d commits sent; want ErrTxnDone and none", err, p.commits)
	}
	if err := confluentclock.Stamp(ctx, clk, &kafka.Message{TopicPartition: kafka.TopicPartition{Topic: &topic}}); err != nil {
		t.Fatalf("a plain stamp after the abort: %v", err)
	}
	if !clk.Snapshot().IsEmpty() {
		t.Fatalf("the clock claims %v of an aborted transaction", clk.Snapshot())
	}
}
