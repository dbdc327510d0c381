package clock

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A clock is one thread of causality: every stamp it makes claims every
// send it folded before. A transaction's sends cannot be claimed by
// anything outside the transaction until it commits — a record naming a
// send that then aborts would name a record that never became visible —
// so a transaction gets its own view of the clock (Begin), and while it
// holds acknowledged sends, a stamp made outside it is refused rather than
// made without them. Waiting instead would deadlock the common sequential
// code, in which the goroutine that stamps is the one that must commit; a
// stamp that skipped the transaction's sends would let a record that
// follows them in the program reach a reader before them, silently.

// ErrOpenTxn is wrapped by an *OpenTxnError: a stamp was refused because a
// transaction begun on the same clock holds acknowledged sends that the
// stamp cannot claim before the transaction commits.
var ErrOpenTxn = errors.New("open transaction holds sends the stamp cannot claim")

// ErrTxnEnded is returned through a transaction's clock, and by
// Txn.Committed, once the transaction has committed or aborted.
var ErrTxnEnded = errors.New("clock: transaction already ended")

// ErrTxnClock is wrapped when something that may only be done to a shared
// clock is done to a transaction's clock (Txn.Clock): Merge, Restore, or a
// plain send helper of an adapter.
var ErrTxnClock = errors.New("not allowed on a transaction's clock")

// ErrPlainSend is wrapped by a *PlainSendError: a record written outside
// any transaction was folded through a transaction's clock.
var ErrPlainSend = errors.New("a send outside the transaction was folded through the transaction's clock")

// TxnSend is one acknowledged send of a transaction.
type TxnSend struct {
	Topic string // empty when the send was folded by coordinate (ProducedAt)
	At    headers.Coordinate
}

func (s TxnSend) String() string {
	if s.Topic == "" {
		return s.At.String()
	}
	return strconv.Quote(s.Topic) + "/" + strconv.FormatInt(int64(s.At.Partition), 10) + "@" + strconv.FormatInt(s.At.Offset, 10)
}

// OpenTxnError is a stamp refused because a transaction begun on the clock
// (Clock.Begin) holds acknowledged sends the stamp does not claim: the
// record would follow them in the program but could reach a reader before
// them. Send the record within that transaction, or once it has ended.
// It wraps ErrOpenTxn.
type OpenTxnError struct {
	Topic string    // the topic of the record whose stamp was refused
	Sends []TxnSend // the open transactions' sends the stamp cannot claim
}

func (e *OpenTxnError) Error() string {
	names := make([]string, 0, min(len(e.Sends), 4))
	for i, s := range e.Sends {
		if i == 3 && len(e.Sends) > 4 {
			names = append(names, fmt.Sprintf("%d more", len(e.Sends)-3))
			break
		}
		names = append(names, s.String())
	}
	return fmt.Sprintf("clock: stamp for topic %q refused: a transaction open on this clock sent %s, which no record outside it may claim until it commits; send this record within the transaction, or after it ends",
		e.Topic, strings.Join(names, ", "))
}

// Unwrap returns ErrOpenTxn.
func (e *OpenTxnError) Unwrap() error { return ErrOpenTxn }

// PlainSendError is a record written outside any transaction (by a plain
// producer) but folded through a transaction's clock. Its claim is kept:
// the record is folded into the shared clock, so an abort cannot drop it.
// But its stamp, if made through the transaction's clock too, may claim
// the transaction's sends, which abort with it: stamp plain sends through
// the shared clock. It wraps ErrPlainSend.
type PlainSendError struct {
	Topic     string
	Partition int32
	Offset    int64
}

func (e *PlainSendError) Error() string {
	return "clock: plain send to " + strconv.Quote(e.Topic) + "/" + strconv.FormatInt(int64(e.Partition), 10) + "@" +
		strconv.FormatInt(e.Offset, 10) + " folded through a transaction's clock: folded into the shared clock instead; stamp and fold plain sends through the shared clock"
}

// Unwrap returns ErrPlainSend.
func (e *PlainSendError) Unwrap() error { return ErrPlainSend }

type txnState uint8

const (
	txnOpen txnState = iota
	txnCommitted
	txnAborted
)

// Txn is one producer transaction's view of a clock, begun with
// Clock.Begin. Its Clock stamps claim everything the shared clock claims
// now — what it observed and the plain sends folded into it, also those
// made after Begin — and the transaction's own acknowledged sends. Folding
// a send through it adds to the transaction only; observing through it
// folds into the shared clock, since a consumed record is a cause anyone
// may claim.
//
// When the client's transaction commits, call Committed: the sends become
// the shared clock's. When it aborts, call Aborted: they are dropped, and no
// stamp ever names them. While the transaction holds sends, stamps made
// through the shared clock (or another transaction's clock) are refused
// with an *OpenTxnError, so no record that follows the transaction's sends
// in the program goes out without claiming them.
//
// The adapters (saramaclock.BeginTxn, confluentclock.BeginTransaction) and
// BeginTransaction for franz-go wrap a Txn around each client's calls.
type Txn struct {
	root *Clock
	view *Clock

	// Guarded by view.mu.
	state txnState
	sends []TxnSend
}

// Begin begins a transaction's view of c: see Txn. Begin on a
// transaction's clock begins a view of the shared clock it belongs to.
func (c *Clock) Begin() *Txn {
	root := c.rootClock()
	t := &Txn{root: root}
	t.view = &Clock{res: root.res, dialect: root.dialect, timeout: root.timeout, txn: t}
	root.txMu.Lock()
	root.open = append(root.open, t)
	root.txMu.Unlock()
	return t
}

// Txn returns the transaction c is the clock of (Txn.Clock), or nil for a
// shared clock. Adapters use it to keep plain sends off a transaction's
// clock.
func (c *Clock) Txn() *Txn { return c.txn }

// Clock returns the transaction's clock. Stamp and fold through it what
// the transactional producer sends; observe through it or through the
// shared clock alike. Once the transaction has ended, everything done
// through it fails with ErrTxnEnded.
func (t *Txn) Clock() *Clock { return t.view }

// Ended says whether the transaction has committed or aborted (Committed,
// Aborted). A wrapper that aborted refuses a later commit by it: once
// Aborted, the transaction's sends are forgotten, and a commit of the
// client's transaction after it would go unclaimed.
func (t *Txn) Ended() bool { return t.usable() != nil }

// Sends returns the transaction's acknowledged sends so far.
func (t *Txn) Sends() []TxnSend {
	t.view.mu.RLock()
	defer t.view.mu.RUnlock()
	return append([]TxnSend(nil), t.sends...)
}

// Committed records that the client's transaction committed: its sends
// fold into the shared clock, so every later stamp claims them, and the
// transaction's clock is done. It returns ErrTxnEnded if the transaction
// had already ended. Call it only once the client confirmed the commit; a
// commit whose outcome is unknown is aborted (Aborted), as the clients
// advise.
func (t *Txn) Committed() error {
	v := t.view
	v.mu.Lock()
	if t.state != txnOpen {
		v.mu.Unlock()
		return ErrTxnEnded
	}
	t.state = txnCommitted
	own := v.clk.Clone()
	held := len(t.sends) > 0
	v.mu.Unlock()
	// Into the shared clock first, out of the open set second: no stamp
	// may pass the open-transaction check without claiming the sends.
	r := t.root
	r.mu.Lock()
	r.clk.Merge(own)
	r.changed()
	r.mu.Unlock()
	r.closeTxn(t, held)
	return nil
}

// Aborted records that the client's transaction aborted, or was abandoned:
// its sends are dropped, no stamp names them, and the transaction's clock
// is done. Stamps through the shared clock are no longer refused for them.
// It does nothing if the transaction had already ended, so a failed abort
// may be retried around it.
func (t *Txn) Aborted() {
	v := t.view
	v.mu.Lock()
	if t.state != txnOpen {
		v.mu.Unlock()
		return
	}
	t.state = txnAborted
	held := len(t.sends) > 0
	v.clk = headers.Clock{}
	t.sends = nil
	v.changed()
	v.mu.Unlock()
	t.root.closeTxn(t, held)
}

// closeTxn removes t from c's open transactions.
func (c *Clock) closeTxn(t *Txn, held bool) {
	c.txMu.Lock()
	for i, o := range c.open {
		if o == t {
			c.open = append(c.open[:i], c.open[i+1:]...)
			break
		}
	}
	c.txMu.Unlock()
	if held {
		c.pending.Add(-1)
	}
}

// rootClock returns the shared clock c belongs to: c itself, or the clock
// a transaction's clock was begun on.
func (c *Clock) rootClock() *Clock {
	if c.txn != nil {
		return c.txn.root
	}
	return c
}

// folder returns the clock an observation through c folds into: the shared
// clock.
func (c *Clock) folder() (*Clock, error) {
	if c.txn == nil {
		return c, nil
	}
	if err := c.txn.usable(); err != nil {
		return nil, err
	}
	return c.txn.root, nil
}

// usable returns ErrTxnEnded once t has ended.
func (t *Txn) usable() error {
	t.view.mu.RLock()
	defer t.view.mu.RUnlock()
	if t.state != txnOpen {
		return ErrTxnEnded
	}
	return nil
}

// checkOpen refuses a stamp for topic made through c while a transaction
// of c's shared clock other than c's own holds sends c does not claim.
func (c *Clock) checkOpen(topic string) error {
	root := c.rootClock()
	if root.pending.Load() == 0 {
		return nil
	}
	root.txMu.Lock()
	open := append([]*Txn(nil), root.open...)
	root.txMu.Unlock()
	var claims *headers.Clock
	var unclaimed []TxnSend
	for _, t := range open {
		if t == c.txn {
			continue
		}
		// A committed transaction's sends count until it leaves the open
		// set, which it does only once they are in the shared clock; an
		// aborted one's are gone already.
		t.view.mu.RLock()
		sends := t.sends
		t.view.mu.RUnlock()
		for _, s := range sends {
			if claims == nil {
				claims = c.Snapshot()
			}
			if o, ok := claims.Offset(s.At.Channel); !ok || o < s.At.Offset {
				unclaimed = append(unclaimed, s)
			}
		}
	}
	if len(unclaimed) > 0 {
		return &OpenTxnError{Topic: topic, Sends: unclaimed}
	}
	return nil
}

// producedInTxn folds an acknowledged send of t's transaction.
func (t *Txn) produced(at headers.Coordinate, topic string) error {
	v := t.view
	v.mu.Lock()
	if t.state != txnOpen {
		v.mu.Unlock()
		return ErrTxnEnded
	}
	first := len(t.sends) == 0
	v.clk.SetOffset(at.Channel, at.Offset)
	t.sends = append(t.sends, TxnSend{Topic: topic, At: at})
	v.changed()
	if first {
		// Counted under v.mu, before any stamp can see the send through
		// the open set.
		t.root.pending.Add(1)
	}
	v.mu.Unlock()
	return nil
}

// plainRecord says whether rec, acknowledged by a franz-go client, was
// written outside any transaction.
func plainRecord(rec *kgo.Record) bool { return !rec.Attrs.IsTransactional() }
