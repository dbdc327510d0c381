package state

// The store's write path and its cache of committed values: a step's
// mutations go to SQLite as multi-row statements, and the values a step
// read stay in memory for the next step.

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"unsafe"

	"github.com/parsley-go/parsley/protocol"
)

// rowsPerStmt is how many rows one multi-row upsert or delete writes: 64
// rows bind 128 parameters, far below SQLite's limit, and amortise
// database/sql's per-statement cost (context watch, argument conversion,
// result) over as many rows.
const rowsPerStmt = 64

// readsPerStmt is how many keys one batched read asks for.
const readsPerStmt = 128

// writeStmts are the multi-row statements, prepared with the others when
// the store opens: preparing inside the transaction would wait for the
// store's single connection, which the transaction holds.
type writeStmts struct {
	putN, delN *sql.Stmt // rowsPerStmt rows
	getN       *sql.Stmt // readsPerStmt keys
	args       []any
}

func (s *Store) prepareWrites(ctx context.Context) error {
	var err error
	q := "INSERT INTO kv (k, v) VALUES " + strings.Repeat("(?, ?), ", rowsPerStmt-1) +
		"(?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v"
	if s.w.putN, err = s.db.PrepareContext(ctx, q); err != nil {
		return err
	}
	q = "DELETE FROM kv WHERE k IN (" + strings.Repeat("?, ", rowsPerStmt-1) + "?)"
	if s.w.delN, err = s.db.PrepareContext(ctx, q); err != nil {
		return err
	}
	q = "SELECT k, v FROM kv WHERE k IN (" + strings.Repeat("?, ", readsPerStmt-1) + "?)"
	if s.w.getN, err = s.db.PrepareContext(ctx, q); err != nil {
		return err
	}
	s.w.args = make([]any, 0, max(2*rowsPerStmt, readsPerStmt))
	return nil
}

// DropCache forgets every cached value; the next reads go to the file. A
// task drops it whenever it rebuilds, so a rebuilt node starts from what
// the file holds.
func (s *Store) DropCache() { s.cache.reset() }

// committed brings cached keys up to muts once they are committed.
func (s *Store) committed(muts []protocol.Mutation) {
	if s.cache.len() == 0 {
		return
	}
	for _, m := range muts {
		s.cache.update(m.Key, m.Value, !m.Delete)
	}
}

// Prefetch reads the committed values of keys not cached into the cache,
// readsPerStmt keys a statement: a step knows the keys its records will
// read, and one query for many of them costs far less than a query each
// (database/sql's per-statement work and SQLite's per-statement setup
// dominate a point read). Keys the file does not hold are cached as absent.
// It is only a hint: it reads committed data, as Get does, and a key it
// did not fetch, or whose entry was evicted since, is read by Get.
//
// Keys the key filter is certain the file does not hold cost no query, nor
// a cache entry (filter.go); Prefetch builds the filter, a part each call.
func (s *Store) Prefetch(ctx context.Context, keys []string) error {
	if s.cache.limit <= 0 {
		return nil
	}
	if !s.filterBuilt {
		if err := s.scanFilter(ctx); err != nil {
			return fmt.Errorf("state: build key filter: %w", err)
		}
	}
	want := s.want[:0]
	for _, k := range keys {
		if !s.cache.has(k) && s.mayHold(k) {
			// Keys the filter rules out are not cached: Get answers them
			// from the filter, and a fold over new keys would only churn
			// the cache with them.
			s.cache.put(k, nil, false) // absent unless the file says otherwise; dedups too
			want = append(want, k)
		}
	}
	s.want = want[:0]
	for len(want) > 0 {
		n := min(len(want), readsPerStmt)
		if err := s.fetch(ctx, want[:n]); err != nil {
			for _, k := range want {
				s.cache.drop1(k)
			}
			return fmt.Errorf("state: prefetch %d keys: %w", len(want), err)
		}
		want = want[n:]
	}
	return nil
}

// fetch reads keys (at most readsPerStmt) into the cache. A short list is
// padded with its first key: one prepared statement serves every length.
func (s *Store) fetch(ctx context.Context, keys []string) error {
	args := s.w.args[:0]
	for _, k := range keys {
		args = append(args, keyBytes(k))
	}
	for len(args) < readsPerStmt {
		args = append(args, args[0])
	}
	s.w.args = args
	rows, err := s.w.getN.QueryContext(ctx, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var k, v sql.RawBytes
		if err := rows.Scan(&k, &v); err != nil {
			return err
		}
		s.cache.put(string(k), v, true)
	}
	return rows.Err()
}

// write applies muts in order inside tx: each run of consecutive puts or
// deletes goes in statements of rowsPerStmt rows and the single-row
// statement for the rest, so a key written twice keeps its last write.
func (s *Store) write(ctx context.Context, tx *sql.Tx, muts []protocol.Mutation) error {
	var putN, delN, put, del *sql.Stmt // bound to tx on first use
	for len(muts) > 0 {
		n := 1
		for n < len(muts) && n < rowsPerStmt && muts[n].Delete == muts[0].Delete {
			n++
		}
		run := muts[:n]
		var err error
		switch {
		case n == rowsPerStmt && run[0].Delete:
			if delN == nil {
				delN = tx.StmtContext(ctx, s.w.delN)
			}
			_, err = delN.ExecContext(ctx, s.bind(run, false)...)
		case n == rowsPerStmt:
			if putN == nil {
				putN = tx.StmtContext(ctx, s.w.putN)
			}
			_, err = putN.ExecContext(ctx, s.bind(run, true)...)
		default:
			// A short run: rows one by one (a statement per length would
			// cost a prepare per length).
			run = run[:1]
			if run[0].Delete {
				if del == nil {
					del = tx.StmtContext(ctx, s.del)
				}
				_, err = del.ExecContext(ctx, s.bind(run, false)...)
			} else {
				if put == nil {
					put = tx.StmtContext(ctx, s.put)
				}
				_, err = put.ExecContext(ctx, s.bind(run, true)...)
			}
		}
		if err != nil {
			if len(run) == 1 {
				return fmt.Errorf("state: write %q: %w", run[0].Key, err)
			}
			return fmt.Errorf("state: write %d rows from %q: %w", len(run), run[0].Key, err)
		}
		muts = muts[len(run):]
	}
	return nil
}

// bind returns the statement arguments for run: each key, and with values
// its value. Keys are passed without copying (the driver copies what it
// binds); a key or value is never nil, which SQLite would bind as NULL.
func (s *Store) bind(run []protocol.Mutation, values bool) []any {
	args := s.w.args[:0]
	for _, m := range run {
		args = append(args, keyBytes(m.Key))
		if values {
			v := m.Value
			if v == nil {
				v = []byte{}
			}
			args = append(args, v)
		}
	}
	s.w.args = args
	return args
}

// keyBytes views key as bytes without copying; the driver only reads them.
func keyBytes(key string) []byte {
	if key == "" {
		return []byte{}
	}
	return unsafe.Slice(unsafe.StringData(key), len(key))
}
