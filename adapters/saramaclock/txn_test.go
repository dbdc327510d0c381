package saramaclock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/parsley-go/parsley/adapters/adaptertest"
	"github.com/parsley-go/parsley/adapters/saramaclock"
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

func producerConfig() *sarama.Config {
	cfg := sarama.NewConfig()
	cfg.Producer.Return.Successes = true
	cfg.Producer.RequiredAcks = sarama.WaitForAll
	cfg.Producer.Partitioner = sarama.NewMurmur2Partitioner
	return cfg
}

// TestSendMessageFailsWhenTheFoldFails: the stamp's lookup succeeds, the
// fold's fails. SendMessage returns the written message's partition and
// offset with a *clock.NotFoldedError naming them, and the clock claims
// nothing of it.
func TestSendMessageFailsWhenTheFoldFails(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addrs, cl := cluster(t, "payments")
	cfg := producerConfig()
	clk, err := saramaclock.New(addrs, cfg,
		clock.TopicIDs(adaptertest.FailLookupsAfter(1, clock.AdminLookup(kadm.NewClient(cl)))),
		clock.TopicIDMaxAge(time.Nanosecond)) // every resolve asks the lookup
	if err != nil {
		t.Fatal(err)
	}
	defer clk.Close()
	p, err := sarama.NewSyncProducer(addrs, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()

	msg := &sarama.ProducerMessage{Topic: "payments", Key: sarama.StringEncoder("k"), Value: sarama.StringEncoder("v")}
	partition, offset, err := saramaclock.SendMessage(ctx, clk, p, msg)
	var nf *clock.NotFoldedError
	if !errors.As(err, &nf) || !errors.Is(err, adaptertest.ErrInjected) || !errors.Is(err, clock.ErrNotFolded) {
		t.Fatalf("SendMessage with a failing fold: %v; want a *clock.NotFoldedError wrapping the lookup's error", err)
	}
	if partition != 0 || offset != 0 || nf.Topic != "payments" || nf.Partition != 0 || nf.Offset != 0 {
		t.Fatalf("SendMessage returned %d@%d, error names %q/%d@%d; want the written payments/0@0", partition, offset, nf.Topic, nf.Partition, nf.Offset)
	}
	if !clk.Snapshot().IsEmpty() {
		t.Fatalf("the clock claims %v after a failed fold", clk.Snapshot())
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
	clk, err := saramaclock.New(addrs, producerConfig())
	if err != nil {
		t.Fatal(err)
	}
	plain, err := sarama.NewSyncProducer(addrs, producerConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	tcfg := producerConfig()
	tcfg.Producer.Idempotent = true
	tcfg.Producer.Transaction.ID = "ledger-writer"
	tcfg.Net.MaxOpenRequests = 1
	transactional, err := sarama.NewSyncProducer(addrs, tcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer transactional.Close()

	send := func(topic string) *sarama.ProducerMessage {
		return &sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder("k"), Value: sarama.StringEncoder(topic)}
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

	tx, err := saramaclock.BeginTxn(clk, transactional)
	if err != nil {
		t.Fatal(err)
	}
	_, plainAt, err := saramaclock.SendMessage(ctx, clk, plain, send("audit"))
	if err != nil {
		t.Fatalf("a plain send while the transaction holds nothing: %v", err)
	}
	_, aborted, err := tx.SendMessage(ctx, send("ledger"))
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
	if _, _, err := saramaclock.SendMessage(ctx, clk, plain, refused); !errors.Is(err, clock.ErrOpenTxn) || len(refused.Headers) != 0 {
		t.Fatalf("a plain send while the transaction holds ledger@%d: %v, headers %v; want ErrOpenTxn and the message untouched", aborted, err, refused.Headers)
	}
	if _, _, err := saramaclock.SendMessage(ctx, tx.Clock(), transactional, send("ledger")); !errors.Is(err, clock.ErrTxnClock) {
		t.Fatalf("SendMessage through the transaction's clock: %v; want ErrTxnClock", err)
	}
	if err := tx.Abort(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := tx.SendMessage(ctx, send("ledger")); !errors.Is(err, saramaclock.ErrTxnDone) {
		t.Fatalf("send through an aborted Txn: %v; want ErrTxnDone", err)
	}
	if o, ok := claims("ledger"); ok {
		t.Fatalf("after the abort the clock claims ledger@%d (the aborted send was at %d)", o, aborted)
	}
	if o, ok := claims("audit"); !ok || o != plainAt {
		t.Fatalf("after the abort the clock claims audit@%d (%v); want the plain send at %d", o, ok, plainAt)
	}

	tx, err = saramaclock.BeginTxn(clk, transactional)
	if err != nil {
		t.Fatal(err)
	}
	_, committed, err := tx.SendMessage(ctx, send("ledger"))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
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

// TestNewRefusesConfigsThatLoseOffsets: a config that cannot fold sends is
// refused by New with a *ConfigError naming the setting; a producer built
// with RequiredAcks = NoResponse anyway has its send reported as not
// folded (ErrNoOffset), never folded at a made-up offset 0.
func TestNewRefusesConfigsThatLoseOffsets(t *testing.T) {
	noAck := producerConfig()
	noAck.Producer.RequiredAcks = sarama.NoResponse
	old := producerConfig()
	old.Version = sarama.V2_7_0_0
	for name, tc := range map[string]struct {
		cfg     *sarama.Config
		setting string
	}{
		"NoResponse": {noAck, "Producer.RequiredAcks = NoResponse"},
		"Version":    {old, "Version = 2.7.0"},
	} {
		_, err := saramaclock.New([]string{"localhost:1"}, tc.cfg)
		var ce *saramaclock.ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, saramaclock.ErrConfig) || ce.Setting != tc.setting {
			t.Errorf("%s: New = %v; want a *ConfigError for %q", name, err, tc.setting)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	addrs, _ := cluster(t, "payments")
	clk, err := saramaclock.New(addrs, producerConfig())
	if err != nil {
		t.Fatal(err)
	}
	p, err := sarama.NewSyncProducer(addrs, noAck)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	msg := &sarama.ProducerMessage{Topic: "payments", Key: sarama.StringEncoder("k"), Value: sarama.StringEncoder("v")}
	_, _, err = saramaclock.SendMessage(ctx, clk, p, msg)
	var nf *clock.NotFoldedError
	if !errors.As(err, &nf) || !errors.Is(err, saramaclock.ErrNoOffset) {
		t.Fatalf("SendMessage through a NoResponse producer: %v; want a *clock.NotFoldedError wrapping ErrNoOffset", err)
	}
	if !clk.Snapshot().IsEmpty() {
		t.Fatalf("the clock claims %v after a send without an offset", clk.Snapshot())
	}
}
