package stage

import (
	"bytes"
	"context"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRestartWithHeldRecords: a payment held for its uncommitted order
// survives a shutdown and the loss of the local store. After the restart it
// is restored from the changelog byte for byte — key, value, every header
// (nil and empty values kept apart), timestamp — and delivered exactly once,
// after its order.
func TestRestartWithHeldRecords(t *testing.T) {
	e := newEnv(t,
		broker.Topic{Name: "orders"}, broker.Topic{Name: "payments"}, broker.Topic{Name: "settlements"})
	orders := NewTopic("orders", String(), String())
	payments := NewTopic("payments", String(), String())
	settlements := NewTopic("settlements", String(), String())
	seen := &collector{}
	var delivered []Message[string, string]
	b := WithState(Named("settlement"), JSON[account](), account{})
	OnFold(b, orders, func(s account, m Message[string, string]) (Step[account], error) {
		seen.add("order " + m.Key)
		s.Ordered = true
		return Next(s, settlements.Send(m.Key, "ordered")), nil
	})
	OnFold(b, payments, func(s account, m Message[string, string]) (Step[account], error) {
		seen.add("payment " + m.Key)
		delivered = append(delivered, m)
		if !s.Ordered {
			return Next(s, settlements.Send(m.Key, "early")), nil
		}
		return Next(s, settlements.Send(m.Key, "settled")), nil
	})
	st := b.Into(settlements).MustBuild()
	e.changelogs(1, st)
	cfg := e.config("i1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	tp, err := e.c.NewClient(kgo.TransactionalID("order-writer"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer tp.Close()
	if err := tp.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	order := rec("orders", 0, "o1", "widget")
	if err := tp.ProduceSync(ctx, order).FirstErr(); err != nil {
		t.Fatal(err)
	}
	clk := clock.New(e.c.Admin())
	if err := clk.RecordProduced(order); err != nil {
		t.Fatal(err)
	}
	pay := rec("payments", 0, "o1", "100")
	pay.Headers = []kgo.RecordHeader{{Key: "trace", Value: []byte("abc")}, {Key: "empty", Value: []byte{}}, {Key: "nil"}}
	pay.Timestamp = time.UnixMilli(1_700_000_000_123)
	if err := clk.Stamp(ctx, pay); err != nil {
		t.Fatal(err)
	}
	e.produce(pay)

	r := e.start(cfg, st)
	waitFor(t, 20*time.Second, "the payment to be held", func() bool {
		for _, ti := range r.app.Tasks() {
			if ti.Held > 0 {
				return true
			}
		}
		return false
	})
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if seen.len() != 0 {
		t.Fatalf("delivered %q before the order committed", seen.snapshot())
	}
	// Lose the local store: the held record must come back from the
	// changelog.
	if err := os.RemoveAll(cfg.StateDir); err != nil {
		t.Fatal(err)
	}
	if err := tp.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	r = e.start(cfg, st)
	got := values(e.readExactly("settlements", 2, 30*time.Second))
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"ordered", "settled"}; !slices.Equal(got, want) {
		t.Fatalf("settlements = %q, want %q", got, want)
	}
	if want := []string{"order o1", "payment o1"}; !slices.Equal(seen.snapshot(), want) {
		t.Fatalf("delivered %q, want %q", seen.snapshot(), want)
	}

	// Byte-identical to the record on the topic.
	fetched := e.readExactly("payments", 1, 10*time.Second)[0]
	m := delivered[0]
	if m.Key != "o1" || m.Value != "100" || m.Offset != fetched.Offset || !m.Timestamp.Equal(fetched.Timestamp) {
		t.Fatalf("delivered %+v, fetched key %q value %q offset %d ts %v", m, fetched.Key, fetched.Value, fetched.Offset, fetched.Timestamp)
	}
	if len(m.Headers) != len(fetched.Headers) {
		t.Fatalf("delivered %d headers, fetched %d", len(m.Headers), len(fetched.Headers))
	}
	for i, h := range fetched.Headers {
		d := m.Headers[i]
		if d.Key != h.Key || !bytes.Equal(d.Value, h.Value) || (d.Value == nil) != (h.Value == nil) {
			t.Fatalf("header %d delivered %q=%q (nil %v), fetched %q=%q (nil %v)", i, d.Key, d.Value, d.Value == nil, h.Key, h.Value, h.Value == nil)
		}
	}
}
