package state

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/parsley-go/parsley/protocol"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// SchemaVersion is the layout this build writes and reads.
const SchemaVersion = 1

// ErrUnknownSchema: the file was written by a schema version this build
// does not know. The task stops rather than guess.
var ErrUnknownSchema = errors.New("state: unknown schema version")

// Store is one task's SQLite file. Reads see committed data only: a step
// stages its writes in a protocol.Batch over the Store and Apply commits
// them once Kafka has committed.
//
// A Store is not safe for concurrent use.
type Store struct {
	path       string
	db         *sql.DB
	get        *sql.Stmt
	put, del   *sql.Stmt
	setCP      *sql.Stmt
	setCPTime  *sql.Stmt
	checkpoint int64
	cpTime     int64 // unix milliseconds; 0: unknown
	mirrors    *Incarnation

	w           writeStmts // write.go
	cacheBytes  int64      // the bound of cache and filter together
	cache       valueCache // committed values only (cache.go)
	filter      *keyFilter // nil: not started (filter.go)
	filterFrom  []byte     // the last key scanned into filter; nil: none
	filterBuilt bool       // filter holds every key of the file
	want        []string   // Prefetch's scratch

	beforeCommit func() error // tests: fail an Apply before SQLite's commit
}

// Open opens (creating if needed) the store at path.
func Open(ctx context.Context, path string, opts ...Option) (*Store, error) {
	o := options{cacheBytes: DefaultCacheBytes}
	for _, opt := range opts {
		opt(&o)
	}
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "busy_timeout(5000)")
	// The changelog is the durable copy, so the file is tuned for speed
	// within SQLite's crash consistency: a page cache that keeps a large
	// table's upper B-tree levels in memory, temporary tables in memory,
	// and checkpoints of the WAL four times rarer than the default (each
	// one an fsync).
	q.Add("_pragma", fmt.Sprintf("cache_size(-%d)", pageCacheKiB(o.cacheBytes)))
	q.Add("_pragma", "temp_store(MEMORY)")
	q.Add("_pragma", "wal_autocheckpoint(4000)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("state: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1) // one writer; a task is single-threaded
	s := &Store{path: path, db: db, cacheBytes: o.cacheBytes, cache: valueCache{limit: o.cacheBytes}}
	if err := s.init(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("state: open %s: %w", path, err)
	}
	return s, nil
}

func (s *Store) init(ctx context.Context) error {
	var v int
	if err := s.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return err
	}
	switch v {
	case 0:
		tx, err := s.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		for _, q := range []string{
			"CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB NOT NULL) WITHOUT ROWID",
			"CREATE TABLE meta (k TEXT PRIMARY KEY, v INTEGER NOT NULL)",
			"INSERT INTO meta (k, v) VALUES ('checkpoint', 0)",
			"INSERT INTO meta (k, v) VALUES ('checkpoint_time', 0)",
			fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion),
		} {
			if _, err := tx.ExecContext(ctx, q); err != nil {
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	case SchemaVersion:
	default:
		return fmt.Errorf("%w: file has version %d, this build knows %d", ErrUnknownSchema, v, SchemaVersion)
	}
	// Files written before the checkpoint time existed lack its row: an
	// unknown time, which Restore treats as too old to trust. The row is
	// additive (older builds ignore it), so the schema version stays.
	if _, err := s.db.ExecContext(ctx, "INSERT OR IGNORE INTO meta (k, v) VALUES ('checkpoint_time', 0)"); err != nil {
		return fmt.Errorf("add checkpoint time: %w", err)
	}
	// Likewise the changelog's identity: a file without it mirrors an
	// unknown incarnation, which Restore does not trust either. One row at
	// most; a table, not a meta row, because meta's values are integers.
	if _, err := s.db.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS changelog (one INTEGER PRIMARY KEY CHECK (one = 1), cluster TEXT NOT NULL, topic_id BLOB NOT NULL)"); err != nil {
		return fmt.Errorf("add changelog identity: %w", err)
	}
	if err := s.readIncarnation(ctx); err != nil {
		return fmt.Errorf("read changelog identity: %w", err)
	}
	if err := s.db.QueryRowContext(ctx, "SELECT v FROM meta WHERE k = 'checkpoint'").Scan(&s.checkpoint); err != nil {
		return fmt.Errorf("read checkpoint: %w", err)
	}
	if err := s.db.QueryRowContext(ctx, "SELECT v FROM meta WHERE k = 'checkpoint_time'").Scan(&s.cpTime); err != nil {
		return fmt.Errorf("read checkpoint time: %w", err)
	}
	for _, p := range []struct {
		stmt **sql.Stmt
		q    string
	}{
		{&s.get, "SELECT v FROM kv WHERE k = ?"},
		{&s.put, "INSERT INTO kv (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v"},
		{&s.del, "DELETE FROM kv WHERE k = ?"},
		{&s.setCP, "UPDATE meta SET v = ? WHERE k = 'checkpoint'"},
		{&s.setCPTime, "UPDATE meta SET v = ? WHERE k = 'checkpoint_time'"},
	} {
		var err error
		if *p.stmt, err = s.db.PrepareContext(ctx, p.q); err != nil {
			return err
		}
	}
	return s.prepareWrites(ctx)
}

// Path returns the file's path.
func (s *Store) Path() string { return s.path }

// Checkpoint returns the changelog offset the committed contents reflect:
// every changelog record below it is applied.
func (s *Store) Checkpoint() int64 { return s.checkpoint }

// CheckpointTime returns the wall-clock time recorded with the checkpoint:
// every committed changelog record at or past the checkpoint was written
// after it. The zero Time means unknown (a new or wiped file, or one
// written before the time was recorded).
func (s *Store) CheckpointTime() time.Time {
	if s.cpTime == 0 {
		return time.Time{}
	}
	return time.UnixMilli(s.cpTime)
}

// Mirrors returns the changelog incarnation the contents were restored
// from, and false when it is unknown (a new file, or one written before
// the identity was recorded).
func (s *Store) Mirrors() (Incarnation, bool) {
	if s.mirrors == nil {
		return Incarnation{}, false
	}
	return *s.mirrors, true
}

func (s *Store) readIncarnation(ctx context.Context) error {
	var inc Incarnation
	var id []byte
	err := s.db.QueryRowContext(ctx, "SELECT cluster, topic_id FROM changelog").Scan(&inc.Cluster, &id)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(id) != len(inc.TopicID) {
		return fmt.Errorf("topic ID of %d bytes, want %d", len(id), len(inc.TopicID))
	}
	copy(inc.TopicID[:], id)
	s.mirrors = &inc
	return nil
}

// Close closes the file.
func (s *Store) Close() error { return s.db.Close() }

// Get implements protocol.Store over the committed contents. The value is
// the caller's to keep and modify.
func (s *Store) Get(key string) ([]byte, bool, error) {
	if v, ok, hit := s.cache.get(key); hit {
		return v, ok, nil
	}
	if !s.mayHold(key) {
		return nil, false, nil
	}
	var v []byte
	err := s.get.QueryRow(keyBytes(key)).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		s.cache.put(key, nil, false)
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("state: get %q: %w", key, err)
	}
	if v == nil {
		v = []byte{}
	}
	s.cache.put(key, v, true)
	return v, true, nil
}

// Put is refused: writes go through a protocol.Batch and Apply.
func (s *Store) Put(key string, _ []byte) error {
	return fmt.Errorf("state: put %q outside a batch", key)
}

// Delete is refused: writes go through a protocol.Batch and Apply.
func (s *Store) Delete(key string) error {
	return fmt.Errorf("state: delete %q outside a batch", key)
}

// Scan implements protocol.Store. Rows are read fully before fn runs, so fn
// may call Get.
func (s *Store) Scan(prefix string, fn func(key string, value []byte) error) error {
	var rows *sql.Rows
	var err error
	lo := []byte(prefix)
	if hi := successor(lo); hi != nil {
		rows, err = s.db.Query("SELECT k, v FROM kv WHERE k >= ? AND k < ? ORDER BY k", lo, hi)
	} else {
		rows, err = s.db.Query("SELECT k, v FROM kv WHERE k >= ? ORDER BY k", lo)
	}
	if err != nil {
		return fmt.Errorf("state: scan %q: %w", prefix, err)
	}
	type kv struct {
		k string
		v []byte
	}
	var all []kv
	for rows.Next() {
		var k, v []byte
		if err := rows.Scan(&k, &v); err != nil {
			rows.Close()
			return fmt.Errorf("state: scan %q: %w", prefix, err)
		}
		if v == nil {
			v = []byte{}
		}
		all = append(all, kv{string(k), v})
	}
	if err := rows.Close(); err != nil {
		return fmt.Errorf("state: scan %q: %w", prefix, err)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("state: scan %q: %w", prefix, err)
	}
	for _, e := range all {
		if err := fn(e.k, e.v); err != nil {
			return err
		}
	}
	return nil
}

// successor returns the smallest byte string greater than every string
// with prefix p, or nil when there is none (p empty or all 0xff).
func successor(p []byte) []byte {
	q := bytes.Clone(p)
	for i := len(q) - 1; i >= 0; i-- {
		if q[i] < 0xff {
			q[i]++
			return q[:i+1]
		}
	}
	return nil
}

// Apply commits muts and the new checkpoint in one SQLite transaction.
// A checkpoint below the current one is kept at the current one.
//
// at is a wall-clock time before which no committed changelog record at or
// past the new checkpoint was written — for a step, a time taken before the
// step began — and becomes the checkpoint time. The zero Time keeps the
// recorded one, which stays valid: it held for an earlier checkpoint, so it
// holds for every record past a later one.
func (s *Store) Apply(ctx context.Context, muts []protocol.Mutation, checkpoint int64, at time.Time) (err error) {
	defer func() {
		if err != nil {
			s.DropCache() // the commit's outcome is unknown
		}
	}()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("state: begin: %w", err)
	}
	defer tx.Rollback()
	s.filterPuts(muts) // before the file may hold them
	if err := s.write(ctx, tx, muts); err != nil {
		return err
	}
	cp := max(checkpoint, s.checkpoint)
	if _, err := tx.StmtContext(ctx, s.setCP).ExecContext(ctx, cp); err != nil {
		return fmt.Errorf("state: write checkpoint: %w", err)
	}
	cpTime := s.cpTime
	if !at.IsZero() {
		cpTime = max(at.UnixMilli(), 1) // 0 means unknown
		if _, err := tx.StmtContext(ctx, s.setCPTime).ExecContext(ctx, cpTime); err != nil {
			return fmt.Errorf("state: write checkpoint time: %w", err)
		}
	}
	if s.beforeCommit != nil {
		if err := s.beforeCommit(); err != nil {
			return fmt.Errorf("state: commit: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("state: commit: %w", err)
	}
	s.checkpoint, s.cpTime = cp, cpTime
	s.committed(muts)
	return nil
}

// replaySpace gives SQLite's page cache the memory of the value cache
// while a replay writes the changelog into the file, and returns the
// function that gives it back. A replay reads nothing through the value
// cache, and it writes batches of rows spread over the whole file: with a
// page cache a quarter the size, the pages a batch dirties outgrow it and
// SQLite writes them out, and reads them back, in the middle of the
// transaction. The value cache is dropped first (it only ever holds
// committed values, so dropping it is always safe), so the store's memory
// stays within its bound.
func (s *Store) replaySpace(ctx context.Context) (func(), error) {
	s.DropCache()
	if _, err := s.db.ExecContext(ctx, fmt.Sprintf("PRAGMA cache_size = -%d", restoreCacheKiB(s.cacheBytes))); err != nil {
		return nil, fmt.Errorf("state: page cache for the replay: %w", err)
	}
	return func() {
		// A failure here leaves the larger cache; the next statement on
		// the connection reports what is wrong with it.
		_, _ = s.db.ExecContext(context.Background(), fmt.Sprintf("PRAGMA cache_size = -%d", pageCacheKiB(s.cacheBytes)))
	}, nil
}

// Reset deletes every key, sets the checkpoint to zero and its time to
// unknown, and records inc as the changelog the file now mirrors, for a
// replay of the whole changelog. The time must not survive: a replay from
// the log start that stops half-way has applied old puts whose tombstones
// may be compacted away before it resumes, so such a file is wiped again
// rather than resumed.
func (s *Store) Reset(ctx context.Context, inc Incarnation) error {
	s.DropCache()
	s.dropFilter() // rebuilt from the file when next needed
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, "DELETE FROM kv"); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "UPDATE meta SET v = 0 WHERE k IN ('checkpoint', 'checkpoint_time')"); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, "INSERT OR REPLACE INTO changelog (one, cluster, topic_id) VALUES (1, ?, ?)", inc.Cluster, inc.TopicID[:]); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	s.checkpoint, s.cpTime, s.mirrors = 0, 0, &inc
	return nil
}

// empty reports whether the store holds no key.
func (s *Store) empty(ctx context.Context) (bool, error) {
	var one int
	err := s.db.QueryRowContext(ctx, "SELECT 1 FROM kv LIMIT 1").Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return true, nil
	}
	return false, err
}

// Entries returns every committed key and value in key order (tests and
// diagnostics).
func (s *Store) Entries() ([]protocol.Mutation, error) {
	var out []protocol.Mutation
	err := s.Scan("", func(k string, v []byte) error {
		out = append(out, protocol.Mutation{Key: k, Value: v})
		return nil
	})
	return out, err
}
