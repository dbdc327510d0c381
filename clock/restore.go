package clock

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/parsley-go/parsley/headers"
)

// Restore replaces the clock's claims with snapshot, a Snapshot taken
// earlier, for a transactional producer whose transaction aborted: take a
// Snapshot when the transaction begins and Restore it on abort. The sends
// folded in between (RecordProduced inside the transaction) are aborted
// records, and a writer names only committed records (parsley.causes
// constraint 8): a later stamp claiming one would hold readers that follow
// the newest Java rules until another record arrives on its channel.
// Within a transaction, claiming its earlier sends is fine: they commit or
// abort with the claiming record.
//
// Anything folded since the snapshot is forgotten too, including the
// committed sends of another producer sharing the clock. A clock that
// anything else folds into while the transaction is open should use Fork
// and Merge instead.
//
// A snapshot naming the zero topic ID is refused and changes nothing.
func (c *Clock) Restore(snapshot *headers.Clock) error {
	if err := checkClock(snapshot); err != nil {
		return fmt.Errorf("clock: restore: %w", err)
	}
	c.mu.Lock()
	c.clk.CopyFrom(snapshot)
	c.enc, c.encOK = nil, false
	c.mu.Unlock()
	return nil
}

// Fork returns a new clock holding c's current claims, with c's resolver,
// dialect and lookup timeout, that folds independently of c: the view of
// one producer transaction. Stamp and fold the transaction's sends (and
// what it consumes) through the fork; when the transaction commits, Merge
// the fork's Snapshot into c, and when it aborts, drop the fork. Sends
// folded into c meanwhile, by a plain producer sharing c, stay claimed
// either way, and no stamp made through c names a record of a
// transaction that may still abort.
//
// The fork owns nothing: its Close does nothing.
func (c *Clock) Fork() *Clock {
	c.mu.RLock()
	defer c.mu.RUnlock()
	f := &Clock{res: c.res, dialect: c.dialect, timeout: c.timeout}
	f.clk.CopyFrom(&c.clk)
	return f
}

// Merge folds claims, a Snapshot of another clock (a committed
// transaction's Fork), into c: each claim of c is raised to the higher of
// the two. Claims naming the zero topic ID are refused and change nothing.
func (c *Clock) Merge(claims *headers.Clock) error {
	if err := checkClock(claims); err != nil {
		return fmt.Errorf("clock: merge: %w", err)
	}
	c.mu.Lock()
	c.clk.Merge(claims)
	c.enc, c.encOK = nil, false
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
