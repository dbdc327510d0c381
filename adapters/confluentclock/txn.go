package confluentclock

import (
	"context"
	"errors"
	"fmt"

	"github.com/confluentinc/confluent-kafka-go/v2/kafka"
	"github.com/parsley-go/parsley/clock"
)

// ErrTxnDone is returned by a Txn's methods once it has committed or
// aborted.
var ErrTxnDone = errors.New("confluentclock: transaction already ended")

// TxnProducer is the part of *kafka.Producer that a Txn uses.
type TxnProducer interface {
	Producer
	BeginTransaction() error
	CommitTransaction(ctx context.Context) error
	AbortTransaction(ctx context.Context) error
}

// Txn is one transaction of a transactional producer (transactional.id
// set, InitTransactions called once), with its own view of the clock
// (clock.Clock.Begin): its stamps claim the clock and the transaction's own
// sends. Commit makes its sends the clock's; Abort drops them, so no stamp
// ever claims an aborted send.
//
// A plain producer may share the clock. Its sends before and during the
// transaction are claimed by the transaction's later ones, and stay
// claimed whatever the transaction does. While the transaction holds
// sends, a plain send through the clock is refused with a
// *clock.OpenTxnError: it could not claim them. Produce it after Commit,
// when it claims them, or within the transaction.
//
// A Txn is not safe for concurrent use.
type Txn struct {
	txn  *clock.Txn
	p    TxnProducer
	done bool
}

// BeginTransaction begins a transaction on p (p.BeginTransaction) whose
// sends fold into a transaction of clk.
func BeginTransaction(clk *clock.Clock, p TxnProducer) (*Txn, error) {
	if err := p.BeginTransaction(); err != nil {
		return nil, fmt.Errorf("confluentclock: begin transaction: %w", err)
	}
	return &Txn{txn: clk.Begin(), p: p}, nil
}

// Clock is the transaction's clock: Stamp and Delivered through it only
// what this producer sends in the transaction (pipelined sends, say).
// Observing through it folds into the shared clock, as through the clock
// itself.
func (t *Txn) Clock() *clock.Clock { return t.txn.Clock() }

// Produce is Produce within the transaction: the message claims what the
// clock claims, the transaction's earlier sends, and nothing of another
// open transaction (whose sends make it fail with a *clock.OpenTxnError).
func (t *Txn) Produce(ctx context.Context, msg *kafka.Message) (partition int32, offset int64, err error) {
	if t.done {
		return -1, -1, ErrTxnDone
	}
	return produce(ctx, t.txn.Clock(), t.p, msg)
}

// Commit commits the transaction (p.CommitTransaction) and then folds its
// sends into the clock. A failed commit folds nothing and leaves the
// transaction open (plain sends stay refused): librdkafka's error says
// whether to retry the commit, abort (Abort) or close the producer.
func (t *Txn) Commit(ctx context.Context) error {
	if t.done || t.txn.Ended() { // ended, or an abort was attempted
		return ErrTxnDone
	}
	if err := t.p.CommitTransaction(ctx); err != nil {
		return fmt.Errorf("confluentclock: commit transaction: %w", err)
	}
	t.done = true
	return t.txn.Committed()
}

// Abort aborts the transaction (p.AbortTransaction) and drops its sends
// from the clock: nothing it sent is claimed, even when the abort itself
// fails (it may be retried).
func (t *Txn) Abort(ctx context.Context) error {
	if t.done {
		return ErrTxnDone
	}
	t.txn.Aborted()
	if err := t.p.AbortTransaction(ctx); err != nil {
		return fmt.Errorf("confluentclock: abort transaction: %w", err)
	}
	t.done = true
	return nil
}
