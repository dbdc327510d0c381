package state

// The bulk replay: a restore into an empty store that has a long changelog
// ahead of it writes the records to a scratch file as they come, in
// changelog order, and builds the store's table from them in key order at
// the end, in one transaction with the checkpoint.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/parsley-go/parsley/protocol"
)

// bulkReplayMin is the fewest changelog offsets a restore into an empty
// store must have ahead of it to replay in bulk: below it, the batches'
// B-tree inserts cost no more than the scratch file's two passes.
const bulkReplayMin = 1 << 16

// A bulkReplay holds the records a restore read so far in a scratch SQLite
// file beside the store, attached to a connection of the store's own as
// "replay": appending to a table without an index costs no B-tree descent
// and no page split, where inserting each record into the store's table,
// in the changelog's order, costs both. The scratch file needs no journal
// and no sync: if the process stops before finish commits, the store is
// as empty as before, its checkpoint unmoved, and the next restore starts
// over with a new scratch file.
type bulkReplay struct {
	s    *Store
	conn *sql.Conn
	path string
	add  *sql.Stmt // rowsPerStmt rows
	add1 *sql.Stmt
	args []any
}

// replayPath is the scratch file of a bulk replay into the store at path.
func replayPath(path string) string { return path + ".replay" }

// removeReplay deletes a bulk replay's scratch file, if any.
func removeReplay(path string) error {
	if err := os.Remove(replayPath(path)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("state: remove the replay file: %w", err)
	}
	return nil
}

// beginBulk starts a bulk replay into s, which must hold no key.
func (s *Store) beginBulk(ctx context.Context) (_ *bulkReplay, err error) {
	if err := removeReplay(s.path); err != nil { // a stopped replay's
		return nil, err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("state: bulk replay: %w", err)
	}
	b := &bulkReplay{s: s, conn: conn, path: replayPath(s.path)}
	defer func() {
		if err != nil {
			b.close()
		}
	}()
	if _, err := conn.ExecContext(ctx, "ATTACH DATABASE ? AS replay", b.path); err != nil {
		return nil, fmt.Errorf("state: bulk replay: attach %s: %w", b.path, err)
	}
	for _, q := range []string{
		"PRAGMA replay.journal_mode = OFF",
		"PRAGMA replay.synchronous = OFF",
		"CREATE TABLE replay.w (k BLOB NOT NULL, v BLOB)",
	} {
		if _, err := conn.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("state: bulk replay: %s: %w", q, err)
		}
	}
	if b.add, err = conn.PrepareContext(ctx, "INSERT INTO replay.w (k, v) VALUES "+strings.Repeat("(?, ?), ", rowsPerStmt-1)+"(?, ?)"); err != nil {
		return nil, fmt.Errorf("state: bulk replay: %w", err)
	}
	if b.add1, err = conn.PrepareContext(ctx, "INSERT INTO replay.w (k, v) VALUES (?, ?)"); err != nil {
		return nil, fmt.Errorf("state: bulk replay: %w", err)
	}
	b.args = make([]any, 0, 2*rowsPerStmt)
	return b, nil
}

// append adds muts, in changelog order, in one transaction. A delete is a
// row without a value.
func (b *bulkReplay) append(ctx context.Context, muts []protocol.Mutation) error {
	tx, err := b.conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("state: bulk replay: %w", err)
	}
	defer tx.Rollback()
	var add, add1 *sql.Stmt
	for len(muts) > 0 {
		run := muts[:min(len(muts), rowsPerStmt)]
		if len(run) < rowsPerStmt {
			run = run[:1]
		}
		args := b.args[:0]
		for _, m := range run {
			var v any // NULL: a delete
			if !m.Delete {
				v = m.Value
				if m.Value == nil {
					v = []byte{}
				}
			}
			args = append(args, keyBytes(m.Key), v)
		}
		b.args = args
		if len(run) == rowsPerStmt {
			if add == nil {
				add = tx.StmtContext(ctx, b.add)
			}
			_, err = add.ExecContext(ctx, args...)
		} else {
			if add1 == nil {
				add1 = tx.StmtContext(ctx, b.add1)
			}
			_, err = add1.ExecContext(ctx, args...)
		}
		if err != nil {
			return fmt.Errorf("state: bulk replay: write %q: %w", run[0].Key, err)
		}
		muts = muts[len(run):]
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("state: bulk replay: %w", err)
	}
	return nil
}

// finish writes the last value of every key the replay read and did not
// delete last into the store's table, in key order, and the checkpoint
// and its time (as Apply does), in one transaction of the store's file.
func (b *bulkReplay) finish(ctx context.Context, checkpoint int64, at time.Time) (err error) {
	s := b.s
	defer func() {
		if err != nil {
			s.DropCache() // the commit's outcome is unknown
		}
	}()
	// The sort behind the window spills to temporary files beyond the
	// page cache, not to memory.
	if _, err := b.conn.ExecContext(ctx, "PRAGMA temp_store = FILE"); err != nil {
		return fmt.Errorf("state: bulk replay: %w", err)
	}
	defer func() {
		// A failure leaves temporary files on disk; the next statement on
		// the connection reports what is wrong with it.
		_, _ = b.conn.ExecContext(context.Background(), "PRAGMA temp_store = MEMORY")
	}()
	tx, err := b.conn.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("state: bulk replay: %w", err)
	}
	defer tx.Rollback()
	// With max(), SQLite takes the bare column v from the row with the
	// highest rowid, the key's last write; grouping sorts by key.
	if _, err := tx.ExecContext(ctx, `INSERT INTO main.kv (k, v)
		SELECT k, v FROM (SELECT k, v, max(rowid) FROM replay.w GROUP BY k)
		WHERE v IS NOT NULL`); err != nil {
		return fmt.Errorf("state: bulk replay: build the table: %w", err)
	}
	cp := max(checkpoint, s.checkpoint)
	if _, err := tx.StmtContext(ctx, s.setCP).ExecContext(ctx, cp); err != nil {
		return fmt.Errorf("state: write checkpoint: %w", err)
	}
	cpTime := s.cpTime
	if !at.IsZero() {
		cpTime = max(at.UnixMilli(), 1)
		if _, err := tx.StmtContext(ctx, s.setCPTime).ExecContext(ctx, cpTime); err != nil {
			return fmt.Errorf("state: write checkpoint time: %w", err)
		}
	}
	if s.beforeCommit != nil {
		if err := s.beforeCommit(); err != nil {
			return fmt.Errorf("state: commit: %w", err)
		}
	}
	// The key filter knows none of the keys written here: it is built
	// again from the file when next needed.
	s.dropFilter()
	s.DropCache()
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("state: commit: %w", err)
	}
	s.checkpoint, s.cpTime = cp, cpTime
	return nil
}

// close ends the replay: it detaches and deletes the scratch file and
// gives the connection back to the store.
func (b *bulkReplay) close() {
	for _, st := range []*sql.Stmt{b.add, b.add1} {
		if st != nil {
			st.Close()
		}
	}
	_, _ = b.conn.ExecContext(context.Background(), "DETACH DATABASE replay")
	b.conn.Close()
	_ = removeReplay(b.s.path) // a file left behind is removed by the next replay
}
