package clock

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/parsley-go/parsley/headers"
)

// Restore replaces the clock's claims with snapshot, a Snapshot taken
// earlier. Anything folded since the snapshot is forgotten, including the
// committed sends of another producer sharing the clock.
//
// It was the way a transactional producer dropped an aborted transaction's
// sends (a writer names only committed records, parsley.causes constraint
// 8). Begin replaces that: a transaction's sends are dropped on abort
// without forgetting anything else, and a stamp that would miss them while
// they are undecided is refused.
//
// A snapshot naming the zero topic ID is refused and changes nothing, and
// so is a transaction's clock (ErrTxnClock).
func (c *Clock) Restore(snapshot *headers.Clock) error {
	if c.txn != nil {
		return fmt.Errorf("clock: restore: %w", ErrTxnClock)
	}
	if err := checkClock(snapshot); err != nil {
		return fmt.Errorf("clock: restore: %w", err)
	}
	c.mu.Lock()
	c.clk.CopyFrom(snapshot)
	c.changed()
	c.mu.Unlock()
	return nil
}

// Fork returns a new clock holding c's current claims, with c's resolver,
// dialect and lookup timeout, that folds independently of c: neither sees
// what the other folds afterwards.
//
// For a producer transaction use Begin instead: its clock also claims what
// the shared clock folds while the transaction is open, and the shared
// clock refuses stamps that would miss the transaction's sends, where a
// fork leaves them to go out unclaimed. A fork of a transaction's clock
// holds that transaction's sends too: use it only for the transaction.
//
// The fork owns nothing: its Close does nothing.
func (c *Clock) Fork() *Clock {
	f := &Clock{res: c.res, dialect: c.dialect, timeout: c.timeout}
	if c.txn != nil {
		f.clk.CopyFrom(c.Snapshot())
		return f
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	f.clk.CopyFrom(&c.clk)
	return f
}

// Merge folds claims, a Snapshot of another clock, into c: each claim of c
// is raised to the higher of the two. Claims naming the zero topic ID are
// refused and change nothing, and so is a transaction's clock
// (ErrTxnClock): merge into the shared clock.
func (c *Clock) Merge(claims *headers.Clock) error {
	if c.txn != nil {
		return fmt.Errorf("clock: merge: %w", ErrTxnClock)
	}
	if err := checkClock(claims); err != nil {
		return fmt.Errorf("clock: merge: %w", err)
	}
	c.mu.Lock()
	c.clk.Merge(claims)
	c.changed()
	c.mu.Unlock()
	return nil
}

// ErrNotFolded is wrapped when a send was acknowledged but folding it into
// the clock failed: the record is written, so sending it again writes it
// twice, and later stamps do not claim it.
var ErrNotFolded = errors.New("acknowledged send not folded into the clock")

// NotFoldedError is an acknowledged send that could not be folded into the
// clock, as the adapters' send helpers return it. It wraps ErrNotFolded
// and the fold's error.
type NotFoldedError struct {
	Topic     string
	Partition int32
	Offset    int64
	Err       error // why the fold failed
}

func (e *NotFoldedError) Error() string {
	return "clock: send to " + strconv.Quote(e.Topic) + "/" + strconv.FormatInt(int64(e.Partition), 10) + "@" +
		strconv.FormatInt(e.Offset, 10) + " acknowledged but not folded: " + e.Err.Error()
}

// Unwrap returns ErrNotFolded and the fold's error.
func (e *NotFoldedError) Unwrap() []error { return []error{ErrNotFolded, e.Err} }
