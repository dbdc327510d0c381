package view_test

import (
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/state"
	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A view never returns a value an aborted step wrote: a transaction that
// wrote key k to the changelog and aborted leaves k at its committed value,
// also after a later transaction committed past it.
func TestAbortedWritesNeverVisible(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t, 1)
	v := f.startView(t)
	cl, err := f.c.NewClient(kgo.TransactionalID("changelog-writer"), kgo.DefaultProduceTopic(stage.ChangelogTopic(f.app, stageName)))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	enc := func(n int64) []byte { b, _ := stage.Int64().Encode(n); return b }
	txn := func(commit kgo.TransactionEndTry, key string, n int64) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(state.FoldKey([]byte(key))), Value: enc(n)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if commit == kgo.TryAbort {
			// The aborted value is in the log, uncommitted, while the view
			// polls: it must not show it.
			for range 5 {
				if got, ok, err := v.Get(key); err != nil || (ok && got == n) {
					t.Fatalf("Get(%q) = %d, %v, %v inside an open transaction", key, got, ok, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		if err := cl.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}
	txn(kgo.TryCommit, "k", 5)
	txn(kgo.TryAbort, "k", 99)
	txn(kgo.TryCommit, "j", 1)
	for {
		if _, ok, err := v.Get("j"); err != nil {
			t.Fatal(err)
		} else if ok {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the view never applied the last commit")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got, ok, err := v.Get("k"); err != nil || !ok || got != 5 {
		t.Fatalf("Get(k) = %d, %v, %v after an aborted write of 99; want the committed 5", got, ok, err)
	}
}
