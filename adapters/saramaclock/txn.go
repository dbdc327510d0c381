package saramaclock

import (
	"context"
	"errors"
	"fmt"

	"github.com/IBM/sarama"
	"github.com/parsley-go/parsley/clock"
)

// ErrTxnDone is returned by a Txn's methods once it has committed or
// aborted.
var ErrTxnDone = errors.New("saramaclock: transaction already ended")

// Txn is one transaction of a transactional sarama producer (a config with
// Producer.Transaction.ID and Producer.Idempotent set), with its own view
// of the clock: a fork (clock.Clock.Fork) that claims the transaction's
// own sends. Commit folds them into the clock; Abort drops them, so no
// stamp ever claims an aborted send. A plain producer may share the clock
// meanwhile: its committed sends stay claimed whatever the transaction
// does.
//
// A Txn is not safe for concurrent use; sarama's transactions are not
// either.
type Txn struct {
	parent *clock.Clock
	clk    *clock.Clock
	p      sarama.SyncProducer
	done   bool
}

// BeginTxn begins a transaction on p (p.BeginTxn) whose sends fold into a
// fork of clk.
func BeginTxn(clk *clock.Clock, p sarama.SyncProducer) (*Txn, error) {
	if err := p.BeginTxn(); err != nil {
		return nil, fmt.Errorf("saramaclock: begin transaction: %w", err)
	}
	return &Txn{parent: clk, clk: clk.Fork(), p: p}, nil
}

// Clock is the transaction's view of the clock: Stamp, Observe and Produced
// through it what belongs to the transaction (a consumed message whose
// offset the transaction commits with AddMessageToTxn, for one).
func (t *Txn) Clock() *clock.Clock { return t.clk }

// SendMessage is SendMessage within the transaction: the message claims
// what the clock claimed when the transaction began, what the transaction
// observed and its earlier sends.
func (t *Txn) SendMessage(ctx context.Context, msg *sarama.ProducerMessage) (partition int32, offset int64, err error) {
	if t.done {
		return -1, -1, ErrTxnDone
	}
	return SendMessage(ctx, t.clk, t.p, msg)
}

// Commit commits the transaction (p.CommitTxn) and then folds its sends
// into the clock. A failed commit folds nothing: sarama's error says
// whether the transaction can still be aborted (Abort) or the producer
// must be closed.
func (t *Txn) Commit() error {
	if t.done {
		return ErrTxnDone
	}
	if err := t.p.CommitTxn(); err != nil {
		return fmt.Errorf("saramaclock: commit transaction: %w", err)
	}
	t.done = true
	return t.parent.Merge(t.clk.Snapshot())
}

// Abort aborts the transaction (p.AbortTxn) and drops its view of the
// clock: nothing it sent or observed is claimed, even when the abort
// itself fails (it may be retried).
func (t *Txn) Abort() error {
	if t.done {
		return ErrTxnDone
	}
	if err := t.p.AbortTxn(); err != nil {
		return fmt.Errorf("saramaclock: abort transaction: %w", err)
	}
	t.done = true
	return nil
}
