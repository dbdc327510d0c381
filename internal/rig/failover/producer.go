package failover

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/internal/wait"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

const producerTxnID = "soak-producer"

// producer writes the soak's input: transaction i holds the two payments
// of order i-1, stamped by the clock as caused by it, and order i; every
// tenth step also writes an order and a payment under an "x" ID in a
// transaction it aborts. What committed is learned afterwards by reading
// the topics, so a transaction whose outcome a broker failure left
// unknown needs no guessing here.
type producer struct {
	adm        *kadm.Client
	addrs      []string
	partitions int32
	logf       func(string, ...any)
	opts       []kgo.Opt // extra client options (a logger)

	committed atomic.Int64 // transactions committed, for progress logs

	mu      sync.Mutex
	aborted []string
}

func (p *producer) abortedIDs() map[string]bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]bool, len(p.aborted))
	for _, id := range p.aborted {
		out[id] = true
	}
	return out
}

func (p *producer) newClient() (*kgo.Client, error) {
	// The client a user of clock is advised to build (clock.NewClient:
	// the failover options, and a seed list without a broker that refuses
	// connections): the producer's own failover is part of every stall the
	// soak measures.
	opts := []kgo.Opt{
		kgo.SeedBrokers(p.addrs...),
		kgo.TransactionalID(producerTxnID),
		kgo.TransactionTimeout(txnTimeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	}
	return clock.NewClient(append(opts, p.opts...)...)
}

// run produces until ctx ends. Failed transactions are aborted and the
// client replaced; only a failure to build a client ends the run early.
func (p *producer) run(ctx context.Context) error {
	cl, err := p.newClient()
	if err != nil {
		return fmt.Errorf("failover: producer: %w", err)
	}
	defer func() { cl.Close() }()
	clk := clock.New(p.adm)
	var prev *kgo.Record // the last committed order, whose payments are due
	for i := 0; ctx.Err() == nil; i++ {
		part := int32(i) % p.partitions
		order := &kgo.Record{Topic: orders, Partition: part, Key: fmt.Appendf(nil, "o%06d", i), Value: []byte("order")}
		recs := []*kgo.Record{}
		if prev != nil {
			for range 2 {
				pay := &kgo.Record{Topic: payments, Partition: prev.Partition, Key: prev.Key, Value: []byte("pay")}
				if err := clk.Stamp(ctx, pay); err != nil {
					if ctx.Err() != nil {
						return nil
					}
					return fmt.Errorf("failover: stamp payment of %s: %w", prev.Key, err)
				}
				recs = append(recs, pay)
			}
		}
		recs = append(recs, order)
		if err := p.transact(ctx, cl, recs, kgo.TryCommit); err != nil {
			p.logf("producer: transaction %d: %v; replacing the client", i, err)
			cl.Close()
			if cl, err = p.newClient(); err != nil {
				return fmt.Errorf("failover: producer: %w", err)
			}
			prev = nil
			continue
		}
		p.committed.Add(1)
		// Not RecordProduced: it resolves the topic under the record's
		// context, which is the finished transaction's.
		if err := clk.Produced(ctx, order.Topic, order.Partition, order.Offset); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("failover: record order %s: %w", order.Key, err)
		}
		prev = order
		if i%10 == 9 {
			id := fmt.Appendf(nil, "x%06d", i)
			o := &kgo.Record{Topic: orders, Partition: part, Key: id, Value: []byte("order")}
			pay := &kgo.Record{Topic: payments, Partition: part, Key: id, Value: []byte("pay")}
			if err := clk.Stamp(ctx, pay); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("failover: stamp payment of %s: %w", id, err)
			}
			// Whatever happens to this transaction, it never commits.
			p.mu.Lock()
			p.aborted = append(p.aborted, string(id))
			p.mu.Unlock()
			if err := p.transact(ctx, cl, []*kgo.Record{o, pay}, kgo.TryAbort); err != nil {
				p.logf("producer: aborted transaction %d: %v; replacing the client", i, err)
				cl.Close()
				if cl, err = p.newClient(); err != nil {
					return fmt.Errorf("failover: producer: %w", err)
				}
			}
		}
		if wait.Sleep(ctx, 40*time.Millisecond) != nil {
			break
		}
	}
	return nil
}

// txnDeadline bounds a transaction's produce, and separately its end (or
// its abort). It outlasts the longest election the soak has seen (19.7 s),
// so that a transaction under way when a broker dies waits for the election
// rather than giving up and replacing the client at its end; the produce
// deadline is shorter than txnTimeout, after which the coordinator would
// abort the transaction itself. At 15 s (with a 20 s transaction timeout) a
// 14 s election ended a produce, and a 15 s one an EndTxn that met
// CONCURRENT_TRANSACTIONS until the dead broker's partitions had a new
// leader, each at the election: the soak counted the replaced client as
// the client's share.
const (
	txnDeadline = 30 * time.Second
	txnTimeout  = 40 * time.Second // franz-go's default
)

// transact writes recs in one transaction and ends it as end says. On a
// produce error it aborts.
func (p *producer) transact(ctx context.Context, cl *kgo.Client, recs []*kgo.Record, end kgo.TransactionEndTry) error {
	if err := cl.BeginTransaction(); err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, txnDeadline)
	defer cancel()
	if err := cl.ProduceSync(tctx, recs...).FirstErr(); err != nil {
		actx, acancel := context.WithTimeout(context.Background(), txnDeadline)
		defer acancel()
		return errors.Join(err, cl.AbortBufferedRecords(actx), cl.EndTransaction(actx, kgo.TryAbort))
	}
	// End even if ctx is done, so the run stops with no open transaction.
	ectx, ecancel := context.WithTimeout(context.Background(), txnDeadline)
	defer ecancel()
	return cl.EndTransaction(ectx, end)
}

// readInput reads what committed on the source topics.
func readInput(ctx context.Context, addrs []string, aborted map[string]bool) (Input, error) {
	in := Input{Ordered: map[string]bool{}, Payments: map[string]int{}, Aborted: aborted}
	recs, err := readCommitted(ctx, addrs, []string{orders, payments}, -1, time.Minute)
	if err != nil {
		return in, err
	}
	for _, r := range recs {
		k := string(r.Key)
		if r.Topic == orders {
			in.Ordered[k] = true
		} else {
			in.Payments[k]++
		}
		if strings.HasPrefix(k, "x") && !aborted[k] {
			return in, fmt.Errorf("failover: %s %s committed but was meant to abort", r.Topic, k)
		}
	}
	return in, nil
}

func readOutputs(ctx context.Context, addrs []string, want int, limit time.Duration) ([]Output, error) {
	recs, err := readCommitted(ctx, addrs, []string{settled}, want, limit)
	if err != nil {
		return nil, err
	}
	outs := make([]Output, len(recs))
	for i, r := range recs {
		outs[i] = Output{Key: string(r.Key), Value: string(r.Value), Partition: r.Partition, Offset: r.Offset}
	}
	return outs, nil
}

// readCommitted reads topics from the start, read_committed. With want < 0
// it stops after 5s without a new record; otherwise once it has want
// records and 5s more brought nothing (a late duplicate would show), or
// when limit passes.
func readCommitted(ctx context.Context, addrs []string, topics []string, want int, limit time.Duration) ([]*kgo.Record, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics(topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	const quiet = 5 * time.Second
	var out []*kgo.Record
	deadline := time.Now().Add(limit)
	lastNew := time.Now()
	for time.Now().Before(deadline) {
		if time.Since(lastNew) > quiet && len(out) >= want {
			return out, nil
		}
		pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		fs.EachRecord(func(r *kgo.Record) {
			out = append(out, r)
			lastNew = time.Now()
		})
	}
	if want >= 0 && len(out) < want {
		return out, fmt.Errorf("failover: read %d records of %v within %v, want %d", len(out), topics, limit, want)
	}
	return out, nil
}
