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

// cacheEntries bounds the committed-value cache. At the limit an arbitrary
// entry makes room: a hot key is read again within a step or two and
// returns, so the cache keeps what the steps keep touching.
const cacheEntries = 1 << 16

// cached is one committed key's value, or its absence.
type cached struct {
	v  []byte
	ok bool
}

// writeStmts are the multi-row statements, prepared with the others when
// the store opens: preparing inside the transaction would wait for the
// store's single connection, which the transaction holds.
type writeStmts struct {
	putN, delN *sql.Stmt // rowsPerStmt rows
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
	s.w.args = make([]any, 0, 2*rowsPerStmt)
	return nil
}

// DropCache forgets every cached value; the next reads go to the file. A
// task drops it whenever it rebuilds, so a rebuilt node starts from what
// the file holds.
func (s *Store) DropCache() { clear(s.cache) }

// lookup returns key's cached committed value, as a copy the caller owns
// (a fold may decode state into a type that aliases it).
func (s *Store) lookup(key string) (v []byte, ok, hit bool) {
	c, hit := s.cache[key]
	if !hit || !c.ok {
		return nil, false, hit
	}
	return append([]byte{}, c.v...), true, true
}

// remember caches a value just read from the file.
func (s *Store) remember(key string, v []byte, ok bool) {
	if s.cache == nil {
		s.cache = make(map[string]cached)
	}
	if len(s.cache) >= cacheEntries {
		for k := range s.cache {
			delete(s.cache, k)
			break
		}
	}
	if ok {
		v = append([]byte{}, v...)
	}
	s.cache[key] = cached{v: v, ok: ok}
}

// committed brings cached keys up to muts once they are committed. Keys
// not cached stay out: a restore's replay does not fill the cache.
func (s *Store) committed(muts []protocol.Mutation) {
	if len(s.cache) == 0 {
		return
	}
	for _, m := range muts {
		if _, hit := s.cache[m.Key]; !hit {
			continue
		}
		if m.Delete {
			s.cache[m.Key] = cached{}
		} else {
			s.cache[m.Key] = cached{v: append([]byte{}, m.Value...), ok: true}
		}
	}
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
