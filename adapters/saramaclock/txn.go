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
// of the clock (clock.Clock.Begin): its stamps claim the clock and the
// transaction's own sends. Commit makes its sends the clock's; Abort drops
// them, so no stamp ever claims an aborted send.
//
// A plain producer may share the clock. Its sends before and during the
// transaction are claimed by the transaction's later ones, and stay
// claimed whatever the transaction does. While the transaction holds
// sends, a plain send through the clock is refused with a
// *clock.OpenTxnError: it could not claim them. Send it after Commit, when
// it claims them, or within the transaction.
//
// A Txn is not safe for concurrent use; sarama's transactions are not
// either.
type Txn struct {
	txn  *clock.Txn
	p    sarama.SyncProducer
	done bool
}

// BeginTxn begins a transaction on p (p.BeginTxn) whose sends fold into a
// transaction of clk.
func BeginTxn(clk *clock.Clock, p sarama.SyncProducer) (*Txn, error) {
	if err := p.BeginTxn(); err != nil {
		return nil, fmt.Errorf("saramaclock: begin transaction: %w", err)
	}
	return &Txn{txn: clk.Begin(), p: p}, nil
}

// Clock is the transaction's clock: Stamp and Produced through it only
// what this producer sends in the transaction (with an AsyncProducer, say).
// Observing through it folds into the shared clock, as through the clock
// itself.
func (t *Txn) Clock() *clock.Clock { return t.txn.Clock() }

// SendMessage is SendMessage within the transaction: the message claims
// what the clock claims, the transaction's earlier sends, and nothing of
// another open transaction (whose sends make it fail with a
// *clock.OpenTxnError).
func (t *Txn) SendMessage(ctx context.Context, msg *sarama.ProducerMessage) (partition int32, offset int64, err error) {
	if t.done {
		return -1, -1, ErrTxnDone
	}
	return send(ctx, t.txn.Clock(), t.p, msg)
}

// Commit commits the transaction (p.CommitTxn) and then folds its sends
// into the clock. A failed commit folds nothing and leaves the transaction
// open (plain sends stay refused): sarama's error says whether it can
// still be aborted (Abort) or the producer must be closed.
func (t *Txn) Commit() error {
	if t.done || t.txn.Ended() { // ended, or an abort was attempted
		return ErrTxnDone
	}
	if err := t.p.CommitTxn(); err != nil {
		return fmt.Errorf("saramaclock: commit transaction: %w", err)
	}
	t.done = true
	return t.txn.Committed()
}

// Abort aborts the transaction (p.AbortTxn) and drops its sends from the
// clock: nothing it sent is claimed, even when the abort itself fails (it
// may be retried).
func (t *Txn) Abort() error {
	if t.done {
		return ErrTxnDone
	}
	t.txn.Aborted()
	if err := t.p.AbortTxn(); err != nil {
		return fmt.Errorf("saramaclock: abort transaction: %w", err)
	}
	t.done = true
	return nil
}
