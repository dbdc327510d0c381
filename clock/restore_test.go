package clock_test

import (
	"context"
	"errors"
	"testing"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
)

// A transactional producer restores the clock it began a transaction with
// when the transaction aborts: no later stamp names the aborted sends.
func TestRestoreForgetsAbortedSends(t *testing.T) {
	x := headers.Channel{Topic: headers.TopicID{1}, Partition: 0}
	y := headers.Channel{Topic: headers.TopicID{2}, Partition: 0}
	c := clock.New(nil)
	if err := c.ProducedAt(headers.Coordinate{Channel: x, Offset: 3}); err != nil {
		t.Fatal(err)
	}
	began := c.Snapshot()
	for _, at := range []headers.Coordinate{{Channel: x, Offset: 5}, {Channel: y, Offset: 0}} {
		if err := c.ProducedAt(at); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Restore(began); err != nil {
		t.Fatal(err)
	}
	got := c.Snapshot()
	if o, ok := got.Offset(x); !ok || o != 3 {
		t.Errorf("claim on x after the abort = %d %v, want the committed 3", o, ok)
	}
	if o, ok := got.Offset(y); ok {
		t.Errorf("claim on y after the abort = %d, want none", o)
	}
	var bad headers.Clock
	bad.SetOffset(headers.Channel{}, 1)
	if err := c.Restore(&bad); err == nil {
		t.Error("a snapshot naming the zero topic ID was restored")
	}
	if o, _ := c.Snapshot().Offset(x); o != 3 {
		t.Errorf("a refused restore changed the clock: x = %d", o)
	}
}

// One clock shared by a transactional and a plain producer: the
// transaction stamps and folds through a fork, the plain producer through
// the clock. An abort drops the fork and keeps the plain producer's
// committed sends, which Restore would forget; a commit merges the fork.
func TestForkKeepsPlainSendsAcrossAnAbort(t *testing.T) {
	txn := headers.Channel{Topic: headers.TopicID{1}, Partition: 0}
	plain := headers.Channel{Topic: headers.TopicID{2}, Partition: 1}
	produce := func(c *clock.Clock, ch headers.Channel, o int64) {
		t.Helper()
		if err := c.ProducedAt(headers.Coordinate{Channel: ch, Offset: o}); err != nil {
			t.Fatal(err)
		}
	}
	shared := clock.New(nil)
	produce(shared, txn, 3) // committed before the transaction

	tx := shared.Fork()
	if o, ok := tx.Snapshot().Offset(txn); !ok || o != 3 {
		t.Fatalf("fork claims %d %v on the transaction's channel; want the clock's 3", o, ok)
	}
	produce(tx, txn, 7)       // inside the transaction
	produce(shared, plain, 4) // a plain send while it is open
	if o, _ := shared.Snapshot().Offset(txn); o != 3 {
		t.Fatalf("the shared clock claims %d of the open transaction's channel; want 3", o)
	}
	if o, ok := tx.Snapshot().Offset(plain); ok {
		t.Fatalf("the fork claims the plain send at %d; it was made after the fork", o)
	}
	// Aborted: the fork is dropped.
	got := shared.Snapshot()
	if o, _ := got.Offset(txn); o != 3 {
		t.Errorf("after the abort the clock claims %d on the transaction's channel; want 3", o)
	}
	if o, ok := got.Offset(plain); !ok || o != 4 {
		t.Errorf("after the abort the clock claims %d %v of the plain send; want 4", o, ok)
	}

	tx = shared.Fork()
	produce(tx, txn, 9)
	if err := shared.Merge(tx.Snapshot()); err != nil { // committed
		t.Fatal(err)
	}
	got = shared.Snapshot()
	if o, _ := got.Offset(txn); o != 9 {
		t.Errorf("after the commit the clock claims %d on the transaction's channel; want 9", o)
	}
	if o, _ := got.Offset(plain); o != 4 {
		t.Errorf("the commit changed the plain claim to %d; want 4", o)
	}

	var bad headers.Clock
	bad.SetOffset(headers.Channel{}, 1)
	if err := shared.Merge(&bad); err == nil {
		t.Error("claims naming the zero topic ID were merged")
	}
	if !shared.Snapshot().Equal(got) {
		t.Error("a refused merge changed the clock")
	}
}

// A stamp through the fork claims its own sends; one through the clock
// does not while the transaction is open.
func TestForkStampsItsOwnSends(t *testing.T) {
	ctx := context.Background()
	id := headers.TopicID{5}
	shared := clock.New(nil, clock.TopicIDs(func(context.Context, string) (headers.TopicID, error) { return id, nil }))
	tx := shared.Fork()
	if err := tx.Produced(ctx, "t", 0, 11); err != nil {
		t.Fatal(err)
	}
	claim := func(c *clock.Clock) (int64, bool) {
		t.Helper()
		hs, err := clock.AppendStamp(ctx, c, "t", []headers.Header(nil))
		if err != nil {
			t.Fatal(err)
		}
		var st headers.Stamp
		if err := headers.ReadStamp(&st, hs); err != nil {
			t.Fatal(err)
		}
		return st.Clock.Offset(headers.Channel{Topic: id})
	}
	if o, ok := claim(tx); !ok || o != 11 {
		t.Errorf("a stamp through the fork claims %d %v; want its send at 11", o, ok)
	}
	if o, ok := claim(shared); ok {
		t.Errorf("a stamp through the shared clock claims the open transaction's send at %d", o)
	}
}

func TestCloseReleasesWhatTheClockOwns(t *testing.T) {
	var order []string
	boom := errors.New("boom")
	c := clock.New(nil,
		clock.OnClose(func() error { order = append(order, "admin"); return boom }),
		clock.OnClose(func() error { order = append(order, "client"); return nil }))
	if err := c.Fork().Close(); err != nil || len(order) != 0 {
		t.Fatalf("closing a fork: %v, released %v; want nothing", err, order)
	}
	if err := c.Close(); !errors.Is(err, boom) {
		t.Fatalf("Close = %v; want the release's error", err)
	}
	if err := c.Close(); !errors.Is(err, boom) {
		t.Fatalf("second Close = %v; want the first call's result", err)
	}
	if len(order) != 2 || order[0] != "admin" || order[1] != "client" {
		t.Fatalf("released %v; want admin then client, once each", order)
	}
	if err := clock.New(nil).Close(); err != nil {
		t.Fatalf("a clock that owns nothing: Close = %v", err)
	}
}

func TestNotFoldedError(t *testing.T) {
	cause := errors.New("lookup timed out")
	var err error = &clock.NotFoldedError{Topic: "payments", Partition: 2, Offset: 41, Err: cause}
	if !errors.Is(err, clock.ErrNotFolded) || !errors.Is(err, cause) {
		t.Fatalf("%v wraps neither ErrNotFolded nor its cause", err)
	}
	if want := `clock: send to "payments"/2@41 acknowledged but not folded: lookup timed out`; err.Error() != want {
		t.Fatalf("message %q; want %q", err.Error(), want)
	}
}
