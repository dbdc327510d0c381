package stage

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type account struct {
	Ordered bool
	Paid    int64
}

// settlementStage folds orders and payments per order ID. A payment
// delivered before its order would emit "early"; causal delivery means it
// never does.
func settlementStage(orders, payments *Topic[string, string], settlements *Topic[string, string], seen *collector) *Stage {
	b := WithState(Named("settlement"), JSON[account](), account{})
	OnFold(b, orders, func(s account, m Message[string, string]) (Step[account], error) {
		seen.add(fmt.Sprintf("order %s %s", m.Key, coordString(m.Topic, m.Partition, m.Offset)))
		s.Ordered = true
		return Next(s, settlements.Send(m.Key, "ordered")), nil
	})
	OnFold(b, payments, func(s account, m Message[string, string]) (Step[account], error) {
		seen.add(fmt.Sprintf("payment %s %s", m.Key, coordString(m.Topic, m.Partition, m.Offset)))
		if !s.Ordered {
			return Next(s, settlements.Send(m.Key, "early")), nil
		}
		s.Paid++
		return Next(s, settlements.Send(m.Key, fmt.Sprintf("settled %d", s.Paid))), nil
	})
	return b.Into(settlements).MustBuild()
}

// TestSettlementDeliversOrderBeforePayment: the payment is visible to the
// stage while its order still sits in an open transaction. The stage must
// hold the payment, then deliver the order first once it commits.
func TestSettlementDeliversOrderBeforePayment(t *testing.T) {
	e := newEnv(t,
		broker.Topic{Name: "orders"}, broker.Topic{Name: "payments"}, broker.Topic{Name: "settlements"})
	orders := NewTopic("orders", String(), String())
	payments := NewTopic("payments", String(), String())
	settlements := NewTopic("settlements", String(), String())
	seen := &collector{}
	st := settlementStage(orders, payments, settlements, seen)
	e.changelogs(1, st)
	r := e.start(e.config("i1"), st)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The order, in a transaction left open.
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
	// The payment, stamped as caused by the order, visible at once.
	clk := clock.New(e.c.Admin())
	if err := clk.RecordProduced(order); err != nil {
		t.Fatal(err)
	}
	pay := rec("payments", 0, "o1", "100")
	if err := clk.Stamp(ctx, pay); err != nil {
		t.Fatal(err)
	}
	e.produce(pay)

	waitFor(t, 20*time.Second, "the payment to be held", func() bool {
		for _, ti := range r.app.Tasks() {
			if ti.Held > 0 {
				return true
			}
		}
		return false
	})
	if n := seen.len(); n != 0 {
		t.Fatalf("delivered %q while the order was uncommitted", seen.snapshot())
	}
	if err := tp.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	got := values(e.readExactly("settlements", 2, 20*time.Second))
	if want := []string{"ordered", "settled 1"}; !slices.Equal(got, want) {
		t.Fatalf("settlements = %q, want %q", got, want)
	}
	// The released payment carries its own coordinate, not the order's.
	if want := []string{"order o1 orders[0]@0", "payment o1 payments[0]@0"}; !slices.Equal(seen.snapshot(), want) {
		t.Fatalf("delivered %q, want %q", seen.snapshot(), want)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestTriangleDerivedAheadOfBase: a derive stage (its own application)
// turns base records into derived ones; a join stage in a second
// application consumes both. The base topic lives on another broker whose
// fetches the test stalls until the join has fetched every derived record,
// so derived records arrive before their base causes. Every base record
// must reach the join before what was derived from it.
func TestTriangleDerivedAheadOfBase(t *testing.T) {
	broker.KfakeOnly(t, "moves partitions between kfake brokers and stalls one broker's fetches")
	e := newEnvWith(t, []broker.Option{broker.Brokers(2)},
		broker.Topic{Name: "base"}, broker.Topic{Name: "derived"}, broker.Topic{Name: "joined"})
	fake := e.c.Fake()
	if err := fake.MoveTopicPartition("base", 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := fake.MoveTopicPartition("derived", 0, 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	baseID, err := e.c.TopicID(ctx, "base")
	if err != nil {
		t.Fatal(err)
	}
	var stall atomic.Bool
	release := make(chan struct{})
	fake.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		fake.KeepControl()
		if !stall.Load() {
			return nil, nil, false
		}
		for _, rt := range req.(*kmsg.FetchRequest).Topics {
			if rt.Topic == "base" || rt.TopicID == baseID {
				fake.SleepControl(func() { <-release })
				break
			}
		}
		return nil, nil, false
	})

	base := NewTopic("base", String(), String())
	derived := NewTopic("derived", String(), String())
	joined := NewTopic("joined", String(), String())
	derive := On(Named("derive"), base, func(m Message[string, string]) ([]Emission, error) {
		return []Emission{derived.Send(m.Key, "d:"+m.Value)}, nil
	}).Into(derived).MustBuild()
	e.changelogs(1, derive)
	const n = 100
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, rec("base", 0, fmt.Sprintf("k%d", i), fmt.Sprintf("v%03d", i)))
	}
	e.produce(recs...)
	r1 := e.start(e.config("d1"), derive)
	e.readExactly("derived", n, 30*time.Second)
	if err := r1.stop(); err != nil {
		t.Fatal(err)
	}

	seen := &collector{}
	join := On(On(Named("join"), base, func(m Message[string, string]) ([]Emission, error) {
		seen.add("base " + m.Value)
		return []Emission{joined.Send(m.Key, "base "+m.Value)}, nil
	}), derived, func(m Message[string, string]) ([]Emission, error) {
		seen.add("derived " + m.Value)
		return []Emission{joined.Send(m.Key, "derived "+m.Value)}, nil
	}).Into(joined).MustBuild()
	e2 := *e
	e2.app = "joiner"
	e2.changelogs(1, join)
	stall.Store(true)
	r2 := e2.start(e2.config("j1"), join)
	waitFor(t, 30*time.Second, "every derived record to be held at the join", func() bool {
		for _, ti := range r2.app.Tasks() {
			if ti.Held == n {
				return true
			}
		}
		return false
	})
	if got := seen.snapshot(); len(got) != 0 {
		t.Fatalf("delivered %q before any base record", got)
	}
	stall.Store(false)
	close(release)
	e2.readExactly("joined", 2*n, 30*time.Second)
	if err := r2.stop(); err != nil {
		t.Fatal(err)
	}
	got := seen.snapshot()
	pos := make(map[string]int)
	for i, s := range got {
		if _, dup := pos[s]; dup {
			t.Fatalf("%q delivered twice", s)
		}
		pos[s] = i
	}
	for i := range n {
		v := fmt.Sprintf("v%03d", i)
		b, okb := pos["base "+v]
		d, okd := pos["derived d:"+v]
		if !okb || !okd {
			t.Fatalf("missing deliveries for %s", v)
		}
		if d < b {
			t.Fatalf("derived d:%s delivered at %d before its base at %d", v, d, b)
		}
	}
}
