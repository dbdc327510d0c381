package netsoak

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/parsley-go/parsley/clock"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// producer writes the soak's input: orders and payments on random keys,
// each stamped by one clock, each awaited and folded before the next is
// stamped, so the order of G is happened-before order. Some records go
// into a transaction that stays open while plain records claiming them
// are written, then commits or aborts.
type producer struct {
	plain, txn *kgo.Client
	clk        *clock.Clock
	rng        *rand.Rand
	keys       int
	rate       time.Duration // pause between records

	mu    sync.Mutex
	truth Truth
	txns  struct{ committed, aborted int }
}

func newProducer(brokers []string, seed uint64, keys int, rate time.Duration) (*producer, error) {
	plain, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return nil, err
	}
	txn, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(fmt.Sprintf("netsoak-producer-%d", seed)),
		kgo.TransactionTimeout(30*time.Second))
	if err != nil {
		plain.Close()
		return nil, err
	}
	return &producer{
		plain: plain, txn: txn, clk: clock.New(kadm.NewClient(plain)),
		rng: rand.New(rand.NewPCG(seed, 0x5eed)), keys: keys, rate: rate,
	}, nil
}

func (p *producer) close() { p.plain.Close(); p.txn.Close() }

// Truth returns a copy of the ground truth so far.
func (p *producer) Truth() *Truth {
	p.mu.Lock()
	defer p.mu.Unlock()
	return &Truth{Inputs: append([]Input(nil), p.truth.Inputs...)}
}

// run writes until stop is closed. Each record is finished (acknowledged
// and recorded) before stop is looked at, so the truth never misses a
// record that reached the log; ctx bounds each write.
func (p *producer) run(ctx context.Context, stop <-chan struct{}) error {
	for {
		select {
		case <-stop:
			return nil
		case <-time.After(p.rate):
		}
		var err error
		if p.rng.IntN(8) == 0 {
			err = p.transaction(ctx, stop)
		} else {
			_, err = p.write(ctx, p.plain)
		}
		if err != nil {
			return err
		}
	}
}

// transaction writes 1–3 records in a transaction, then 1–3 plain records
// that claim them while it is still open, holds it open a while, and
// commits it (or, one time in four, aborts it).
func (p *producer) transaction(ctx context.Context, stop <-chan struct{}) error {
	if err := p.txn.BeginTransaction(); err != nil {
		return err
	}
	var inTxn []int
	for range 1 + p.rng.IntN(3) {
		i, err := p.write(ctx, p.txn)
		if err != nil {
			_ = p.txn.EndTransaction(context.WithoutCancel(ctx), kgo.TryAbort)
			p.resolve(inTxn, false)
			return err
		}
		inTxn = append(inTxn, i)
	}
	for range 1 + p.rng.IntN(3) {
		if _, err := p.write(ctx, p.plain); err != nil {
			_ = p.txn.EndTransaction(context.WithoutCancel(ctx), kgo.TryAbort)
			p.resolve(inTxn, false)
			return err
		}
	}
	hold := time.Duration(50+p.rng.IntN(700)) * time.Millisecond
	stopped := false
	select {
	case <-stop:
		stopped = true
	case <-time.After(hold):
	}
	commit := !stopped && p.rng.IntN(4) != 0
	if err := p.txn.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		// The outcome is unknown to us; a read of the topic would tell,
		// but the soak's producer link is never faulted, so this is a
		// real failure.
		p.resolve(inTxn, false)
		return fmt.Errorf("netsoak: end producer transaction: %w", err)
	}
	p.resolve(inTxn, commit)
	return nil
}

func (p *producer) resolve(idx []int, committed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, i := range idx {
		p.truth.Inputs[i].Committed = committed
	}
	if len(idx) > 0 {
		if committed {
			p.txns.committed++
		} else {
			p.txns.aborted++
		}
	}
}

// write stamps, produces and folds one record and returns its index in the
// truth. A record written through the transactional client counts as
// committed only once its transaction commits.
func (p *producer) write(ctx context.Context, cl *kgo.Client) (int, error) {
	p.mu.Lock()
	g := int64(len(p.truth.Inputs) + 1)
	p.mu.Unlock()
	key := fmt.Sprintf("k%03d", p.rng.IntN(p.keys))
	topic := TopicOrders
	if p.rng.IntN(2) == 0 {
		topic = TopicPayments
	}
	v, _ := json.Marshal(Value{G: g, Key: key})
	rec := &kgo.Record{Topic: topic, Key: []byte(key), Value: v}
	if err := p.clk.Stamp(ctx, rec); err != nil {
		return 0, err
	}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return 0, err
	}
	if err := p.clk.RecordProduced(rec); err != nil {
		return 0, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.truth.Inputs = append(p.truth.Inputs, Input{
		G: g, Key: key, Topic: topic, Partition: rec.Partition, Offset: rec.Offset, Committed: cl == p.plain,
	})
	return len(p.truth.Inputs) - 1, nil
}
