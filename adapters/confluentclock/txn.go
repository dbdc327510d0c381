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
// set, InitTransactions called once), with its own view of the clock: a
// fork (clock.Clock.Fork) that claims the transaction's own sends. Commit
// folds them into the clock; Abort drops them, so no stamp ever claims an
// aborted send. A plain producer may share the clock meanwhile: its
// committed sends stay claimed whatever the transaction does.
//
// A Txn is not safe for concurrent use.
type Txn struct {
	parent *clock.Clock
	clk    *clock.Clock
	p      TxnProducer
	done   bool
}

// BeginTransaction begins a transaction on p (p.BeginTransaction) whose
// sends fold into a fork of clk.
func BeginTransaction(clk *clock.Clock, p TxnProducer) (*Txn, error) {
	if err := p.BeginTransaction(); err != nil {
		return nil, fmt.Errorf("confluentclock: begin transaction: %w", err)
	}
	return &Txn{parent: clk, clk: clk.Fork(), p: p}, nil
}

// Clock is the transaction's view of the clock: Stamp, Observe and
// Delivered through it what belongs to the transaction (a consumed message
// whose offset the transaction commits with SendOffsetsToTransaction, for
// one).
func (t *Txn) Clock() *clock.Clock { return t.clk }

// Produce is Produce within the transaction: the message claims what the
// clock claimed when the transaction began, what the transaction observed
// and its earlier sends.
func (t *Txn) Produce(ctx context.Context, msg *kafka.Message) (partition int32, offset int64, err error) {
	if t.done {
		return -1, -1, ErrTxnDone
	}
	return Produce(ctx, t.clk, t.p, msg)
}

// Commit commits the transaction (p.CommitTransaction) and then folds its
// sends into the clock. A failed commit folds nothing: librdkafka's error
// says whether to retry the commit, abort (Abort) or close the producer.
func (t *Txn) Commit(ctx context.Context) error {
	if t.done {
		return ErrTxnDone
	}
	if err := t.p.CommitTransaction(ctx); err != nil {
		return fmt.Errorf("confluentclock: commit transaction: %w", err)
	}
	t.done = true
	return t.parent.Merge(t.clk.Snapshot())
}

// Abort aborts the transaction (p.AbortTransaction) and drops its view of
// the clock: nothing it sent or observed is claimed, even when the abort
// itself fails (it may be retried).
func (t *Txn) Abort(ctx context.Context) error {
	if t.done {
		return ErrTxnDone
	}
	if err := t.p.AbortTransaction(ctx); err != nil {
		return fmt.Errorf("confluentclock: abort transaction: %w", err)
	}
	t.done = true
	return nil
}
