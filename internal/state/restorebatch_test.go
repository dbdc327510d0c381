package state

import (
	"context"
	"errors"
	"maps"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRestoreKeepsTheLastWrite: a changelog whose 1,000 keys are written
// in every transaction, read in many small polls, restores to each key's
// last write with the keys deleted last absent, and the checkpoint at the
// changelog's end — in sorted batches (crossing restoreBatchKeys once) and
// in bulk.
func TestRestoreKeepsTheLastWrite(t *testing.T) {
	for _, c := range []struct {
		name    string
		bulkMin int64
	}{{"batches", math.MaxInt64}, {"bulk", 1}} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			l := newChangelog(t, map[string]*string{"cleanup.policy": ptr("delete")}) // nothing compacted away
			want, end := writeRewrittenKeys(ctx, l, restoreBatchKeys+4000)
			s := open(t, filepath.Join(t.TempDir(), "t.db"))
			// Fetches of a few hundred records: many polls a batch.
			newClient := func(opts ...kgo.Opt) (*kgo.Client, error) {
				return l.c.NewClient(append(opts, kgo.FetchMaxPartitionBytes(4<<10), kgo.FetchMaxBytes(4<<10))...)
			}
			res, err := restore(ctx, l.c.Admin(), newClient, "cl", 0, s, nil, c.bulkMin)
			if err != nil {
				t.Fatal(err)
			}
			if res.Records != restoreBatchKeys+4000 {
				t.Errorf("read %d records, want %d", res.Records, restoreBatchKeys+4000)
			}
			checkRestored(t, s, want, end)
			if _, err := os.Stat(replayDir(s.Path())); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("replay file after the restore: %v", err)
			}
		})
	}
}

// writeRewrittenKeys writes total records of 1,000 keys to l, in
// transactions of 2,000, the last 1,000 deleting every seventh key, and
// returns the keys' last values and the changelog's end.
func writeRewrittenKeys(ctx context.Context, l *changelog, total int) (map[string]string, int64) {
	const keys, txn = 1000, 2000
	want := map[string]string{}
	var end int64
	for i := 0; i < total; i += txn {
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
	return want, end
}

// checkRestored checks s holds exactly want, read through Get (the value
// cache and the key filter) as well as in the file, at checkpoint end.
func checkRestored(t *testing.T, s *Store, want map[string]string, end int64) {
	t.Helper()
	got := contents(t, s)
	if len(got) != len(want) {
		t.Errorf("restored %d keys, want %d", len(got), len(want))
	}
	keys := make([]string, 0, len(want)+1)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("key %s = %q, want %q (its last write)", k, got[k], v)
		}
		keys = append(keys, k)
	}
	if err := s.Prefetch(context.Background(), append(keys, "k-never-written")); err != nil {
		t.Fatal(err)
	}
	for k, v := range want {
		if b, ok, err := s.Get(k); err != nil || !ok || string(b) != v {
			t.Fatalf("Get(%s) = %q, %v, %v; want %q", k, b, ok, err, v)
		}
	}
	if s.Checkpoint() != end {
		t.Errorf("checkpoint %d, want %d (the changelog's end)", s.Checkpoint(), end)
	}
}

// TestBulkReplayIntoAStoreWithAFilter: a store restored from an empty
// changelog, whose key filter a prefetch then built on the empty file,
// answers every key after a bulk replay of what the changelog holds since:
// the replay writes no key through the filter, so the filter is built
// again from the file.
func TestBulkReplayIntoAStoreWithAFilter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := newChangelog(t, nil)
	s := open(t, filepath.Join(t.TempDir(), "t.db"))
	l.restore(ctx, s, time.Now())
	if err := s.Prefetch(ctx, []string{"k1", "k2"}); err != nil {
		t.Fatal(err)
	}
	if !s.filterBuilt {
		t.Fatal("no filter built on the empty file")
	}
	want, end := writeRewrittenKeys(ctx, l, 6000)
	newClient := func(opts ...kgo.Opt) (*kgo.Client, error) { return l.c.NewClient(opts...) }
	if _, err := restore(ctx, l.c.Admin(), newClient, "cl", 0, s, nil, 1); err != nil {
		t.Fatal(err)
	}
	checkRestored(t, s, want, end)
}

// TestBulkReplayThatStopsLeavesTheStoreEmpty: a bulk replay whose final
// commit fails leaves the store without keys at its old checkpoint and no
// scratch file; a scratch file left by a process that stopped is replaced;
// the next restore completes.
func TestBulkReplayThatStopsLeavesTheStoreEmpty(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	l := newChangelog(t, nil)
	want, end := writeRewrittenKeys(ctx, l, 6000)
	s := open(t, filepath.Join(t.TempDir(), "t.db"))
	newClient := func(opts ...kgo.Opt) (*kgo.Client, error) { return l.c.NewClient(opts...) }
	s.beforeCommit = func() error { return errors.New("injected") }
	if _, err := restore(ctx, l.c.Admin(), newClient, "cl", 0, s, nil, 1); err == nil {
		t.Fatal("restore with a failing commit succeeded")
	}
	s.beforeCommit = nil
	if got := contents(t, s); len(got) != 0 || s.Checkpoint() != 0 {
		t.Fatalf("after a failed bulk replay: %d keys at checkpoint %d, want none at 0", len(got), s.Checkpoint())
	}
	if _, err := os.Stat(replayDir(s.Path())); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("replay file after a failed restore: %v", err)
	}
	if err := os.MkdirAll(replayDir(s.Path()), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(replayDir(s.Path()), "0"), []byte("a run a stopped replay left"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := restore(ctx, l.c.Admin(), newClient, "cl", 0, s, nil, 1); err != nil {
		t.Fatal(err)
	}
	checkRestored(t, s, want, end)
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

// TestBulkReplayMergesRunsNewestFirst: the merge takes each key's write
// from the newest run that has one — the empty key too — and drops a key
// whose newest write deletes it.
func TestBulkReplayMergesRunsNewestFirst(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "t.db"))
	b, err := s.beginBulk()
	if err != nil {
		t.Fatal(err)
	}
	defer b.close()
	put := func(k, v string) protocol.Mutation { return protocol.Mutation{Key: k, Value: []byte(v)} }
	del := func(k string) protocol.Mutation { return protocol.Mutation{Key: k, Delete: true} }
	for _, run := range [][]protocol.Mutation{
		{put("", "old"), put("a", "1"), put("gone", "x"), put("kept", "k")},
		{put("a", "2"), put("", "new"), put("a", "3")}, // a's last write in the run wins
		{del("gone"), put("z", "")},
	} {
		if err := b.append(run); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.finish(ctx, 7, time.Time{}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"": "new", "a": "3", "kept": "k", "z": ""}
	if got := contents(t, s); !maps.Equal(got, want) {
		t.Fatalf("merged %q, want %q", got, want)
	}
	if s.Checkpoint() != 7 {
		t.Fatalf("checkpoint %d, want 7", s.Checkpoint())
	}
}

// restore is Restore from the brokers with the bulk replay's threshold
// given: bulkMin offsets ahead of an empty store.
func restore(ctx context.Context, admin *kadm.Client, newClient func(...kgo.Opt) (*kgo.Client, error), topic string, p int32, st *Store, now func() time.Time, bulkMin int64) (Restored, error) {
	src := KafkaSource(admin, newClient, topic, p)
	defer src.Close()
	return restoreFrom(ctx, src, st, now, bulkMin)
}
