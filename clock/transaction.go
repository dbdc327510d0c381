package clock

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Transaction is one transaction of a transactional franz-go client
// (kgo.TransactionalID set) with a Txn of a clock around it: its sends are
// stamped and folded through the transaction's clock, claimed by the
// shared clock once the client committed them, and never claimed if the
// transaction aborts. A plain producer may share the clock: its sends
// before and during the transaction are claimed by the transaction's, and
// while the transaction holds sends, the plain producer's stamps are
// refused (an *OpenTxnError) rather than go out without claiming them.
//
// A Transaction is not safe for concurrent use; a franz-go transaction is
// one per client at a time. A consumer that commits its offsets in the
// transaction (kgo.GroupTransactSession) uses Clock.Begin directly, and
// calls Txn.Committed or Txn.Aborted by what the session's End reports.
type Transaction struct {
	txn  *Txn
	cl   *kgo.Client
	done bool
}

// BeginTransaction begins a transaction on cl (cl.BeginTransaction) whose
// sends fold into a transaction of clk (clk.Begin).
func BeginTransaction(clk *Clock, cl *kgo.Client) (*Transaction, error) {
	if err := cl.BeginTransaction(); err != nil {
		return nil, fmt.Errorf("clock: begin transaction: %w", err)
	}
	return &Transaction{txn: clk.Begin(), cl: cl}, nil
}

// Clock returns the transaction's clock (Txn.Clock): stamp and fold
// through it only what this client sends in the transaction.
func (t *Transaction) Clock() *Clock { return t.txn.Clock() }

// ProduceSync stamps rec through the transaction's clock, produces it in
// the transaction and waits for the acknowledgement, then folds it, so
// the transaction's next stamps claim it and, once it commits, every
// stamp of the shared clock does.
//
// A failed produce is its error and folds nothing; rec is left unstamped,
// so it can be produced again. An acknowledged send that cannot be folded
// returns a *NotFoldedError: the record is in the transaction.
func (t *Transaction) ProduceSync(ctx context.Context, rec *kgo.Record) error {
	if t.done {
		return ErrTxnEnded
	}
	own := rec.Headers
	if err := t.txn.view.Stamp(ctx, rec); err != nil {
		return err
	}
	if err := t.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		rec.Headers = own
		return fmt.Errorf("clock: produce to %q in the transaction: %w", rec.Topic, err)
	}
	if err := t.txn.view.RecordProduced(rec); err != nil {
		return &NotFoldedError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Err: err}
	}
	return nil
}

// Commit commits the transaction (cl.EndTransaction with kgo.TryCommit)
// and then folds its sends into the shared clock. A failed commit folds
// nothing and leaves the transaction open: franz-go's error says whether
// to abort (Abort), as it advises after a commit whose outcome is
// unknown.
func (t *Transaction) Commit(ctx context.Context) error {
	if t.done || t.txn.Ended() { // ended, or an abort was attempted
		return ErrTxnEnded
	}
	if err := t.cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("clock: commit transaction: %w", err)
	}
	t.done = true
	return t.txn.Committed()
}

// Abort aborts the transaction (records still buffered are dropped, then
// cl.EndTransaction with kgo.TryAbort) and drops its sends from the clock:
// nothing it sent is ever claimed, even when the abort itself fails (it
// may be retried).
func (t *Transaction) Abort(ctx context.Context) error {
	if t.done {
		return ErrTxnEnded
	}
	t.txn.Aborted()
	err := t.cl.AbortBufferedRecords(ctx)
	if err == nil {
		err = t.cl.EndTransaction(ctx, kgo.TryAbort)
	}
	if err != nil {
		return fmt.Errorf("clock: abort transaction: %w", err)
	}
	t.done = true
	return nil
}
