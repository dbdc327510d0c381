package state

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRestoreBatchesKeepTheLastWrite: a restore gathers many small polls
// into each batch it writes, and crosses restoreBatchKeys once; a key
// rewritten in every transaction, within a batch and across the boundary,
// ends with its last value, a key deleted last stays deleted, and the
// checkpoint is the changelog's end.
func TestRestoreBatchesKeepTheLastWrite(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := newChangelog(t, map[string]*string{"cleanup.policy": ptr("delete")}) // nothing compacted away
	const (
		keys  = 1000
		total = restoreBatchKeys + 4*keys // past one batch
		txn   = 2 * keys
	)
	want := map[string]string{}
	var end int64
	for i := 0; i < total; i += txn {
		// Two steps' writes of the same 1,000 keys in each transaction.
		var ms []protocol.Mutation
		for j := i; j < min(i+txn, total); j++ {
			k := "k" + strconv.Itoa(j%keys)
			if j >= total-keys && j%7 == 0 {
				ms = append(ms, protocol.Mutation{Key: k, Delete: true})
				delete(want, k)
				continue
			}
			v := strconv.Itoa(j)
			ms = append(ms, protocol.Mutation{Key: k, Value: []byte(v)})
			want[k] = v
		}
		l.commit(ctx, time.Now(), ms...)
		end += int64(len(ms)) + 1 // and the commit marker
	}
	s := open(t, filepath.Join(t.TempDir(), "t.db"))
	// Fetches of a few hundred records: many polls a batch.
	newClient := func(opts ...kgo.Opt) (*kgo.Client, error) {
		return l.c.NewClient(append(opts, kgo.FetchMaxPartitionBytes(4<<10), kgo.FetchMaxBytes(4<<10))...)
	}
	res, err := Restore(ctx, l.c.Admin(), newClient, "cl", 0, s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Records != total {
		t.Errorf("read %d records, want %d", res.Records, total)
	}
	got := contents(t, s)
	if len(got) != len(want) {
		t.Errorf("restored %d keys, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("key %s = %q, want %q (its last write)", k, got[k], v)
		}
	}
	if s.Checkpoint() != end {
		t.Errorf("checkpoint %d, want %d (the changelog's end)", s.Checkpoint(), end)
	}
}

// TestRestoreGivesThePageCacheBack: a replay borrows the value cache's
// memory for SQLite's pages, and the store has its own page cache again
// once the restore returns, restored or failed.
func TestRestoreGivesThePageCacheBack(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l := newChangelog(t, nil)
	s, err := Open(ctx, filepath.Join(t.TempDir(), "t.db"), CacheBytes(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	pages := func() int64 {
		var kib int64
		if err := s.db.QueryRowContext(ctx, "PRAGMA cache_size").Scan(&kib); err != nil {
			t.Fatal(err)
		}
		return -kib
	}
	before := pages()
	if before != pageCacheKiB(64<<20) {
		t.Fatalf("page cache %d KiB at open, want %d", before, pageCacheKiB(64<<20))
	}
	l.restore(ctx, s, time.Now())
	if got := pages(); got != before {
		t.Errorf("page cache %d KiB after a restore, want %d", got, before)
	}
	newClient := func(opts ...kgo.Opt) (*kgo.Client, error) { return l.c.NewClient(opts...) }
	if _, err := Restore(ctx, l.c.Admin(), newClient, "no-such-topic", 0, s, nil); err == nil {
		t.Fatal("restore of a missing changelog succeeded")
	}
	if got := pages(); got != before {
		t.Errorf("page cache %d KiB after a failed restore, want %d", got, before)
	}
}
