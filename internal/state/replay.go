package state

// The bulk replay: a restore into an empty store that has a long changelog
// ahead of it sorts what it reads into runs in scratch files, and at the
// end merges the runs into the store's table in key order, in one
// transaction with the checkpoint.

import (
	"bufio"
	"bytes"
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/parsley-go/parsley/protocol"
)

// bulkReplayMin is the fewest changelog offsets a restore into an empty
// store must have ahead of it to replay in bulk: below it, the batches'
// B-tree inserts cost no more than writing and merging the runs.
const bulkReplayMin = 1 << 16

// A bulkReplay keeps the batches a restore read as sorted runs in scratch
// files beside the store, one file a batch holding the last write of each
// of its keys. Inserting a batch into the store's table costs a B-tree
// descent and, often, a page split per row, all over the file; merging the
// runs at the end inserts every key once, in key order, at the table's
// right edge, which costs neither. The scratch files need no sync: if the
// process stops before finish commits, the store is as empty as before,
// its checkpoint unmoved, and the next restore starts over.
type bulkReplay struct {
	s    *Store
	dir  string
	runs []string
	buf  []byte
}

// replayDir is the scratch directory of a bulk replay into the store at
// path.
func replayDir(path string) string { return path + ".replay" }

// beginBulk starts a bulk replay into s, which must hold no key, after
// removing what a stopped one left.
func (s *Store) beginBulk() (*bulkReplay, error) {
	dir := replayDir(s.path)
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("state: bulk replay: %w", err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("state: bulk replay: %w", err)
	}
	return &bulkReplay{s: s, dir: dir}, nil
}

// append writes muts, in changelog order, as a run: sorted by key, the
// last write of each key (a delete too). It sorts muts in place.
func (b *bulkReplay) append(muts []protocol.Mutation) (err error) {
	path := filepath.Join(b.dir, strconv.Itoa(len(b.runs)))
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("state: bulk replay: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("state: bulk replay: %w", cerr)
		}
	}()
	w := bufio.NewWriterSize(f, 1<<18)
	for _, m := range lastPerKey(muts) {
		b.buf = appendEntry(b.buf[:0], m)
		if _, err := w.Write(b.buf); err != nil {
			return fmt.Errorf("state: bulk replay: %w", err)
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("state: bulk replay: %w", err)
	}
	b.runs = append(b.runs, path)
	return nil
}

// An entry of a run: the key's length and bytes, then 0 and nothing for a
// delete, or 1 and the value's length and bytes for a put.
func appendEntry(dst []byte, m protocol.Mutation) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(m.Key)))
	dst = append(dst, m.Key...)
	if m.Delete {
		return append(dst, 0)
	}
	dst = append(dst, 1)
	dst = binary.AppendUvarint(dst, uint64(len(m.Value)))
	return append(dst, m.Value...)
}

// errRun: a run file that does not hold what append wrote.
var errRun = errors.New("state: bulk replay: damaged run")

// cursor reads one run's entries in order.
type cursor struct {
	r      *bufio.Reader
	f      *os.File
	run    int // later runs hold later writes
	key    []byte
	value  []byte
	delete bool
}

// next reads the next entry; false at the run's end.
func (c *cursor) next() (bool, error) {
	n, err := binary.ReadUvarint(c.r)
	if errors.Is(err, io.EOF) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("%w: %v", errRun, err)
	}
	if c.key, err = readN(c.r, c.key[:0], n); err != nil {
		return false, err
	}
	kind, err := c.r.ReadByte()
	if err != nil || kind > 1 {
		return false, fmt.Errorf("%w: entry kind %d, %v", errRun, kind, err)
	}
	c.delete, c.value = kind == 0, c.value[:0]
	if c.delete {
		return true, nil
	}
	if n, err = binary.ReadUvarint(c.r); err != nil {
		return false, fmt.Errorf("%w: %v", errRun, err)
	}
	if c.value, err = readN(c.r, c.value, n); err != nil {
		return false, err
	}
	return true, nil
}

func readN(r *bufio.Reader, dst []byte, n uint64) ([]byte, error) {
	if n > 1<<31 {
		return nil, fmt.Errorf("%w: length %d", errRun, n)
	}
	if uint64(cap(dst)) < n {
		dst = make([]byte, n)
	}
	dst = dst[:n]
	if _, err := io.ReadFull(r, dst); err != nil {
		return nil, fmt.Errorf("%w: %v", errRun, err)
	}
	return dst, nil
}

// cursors orders the runs' current entries by key, and a key's entries
// newest run first.
type cursors []*cursor

func (h cursors) Len() int { return len(h) }
func (h cursors) Less(i, j int) bool {
	if c := bytes.Compare(h[i].key, h[j].key); c != 0 {
		return c < 0
	}
	return h[i].run > h[j].run
}
func (h cursors) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *cursors) Push(x any)   { *h = append(*h, x.(*cursor)) }
func (h *cursors) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// finish merges the runs into the store's table — the newest write of
// every key, deletes dropped — in key order, and writes the checkpoint
// and its time (as Apply does), in one transaction of the store's file.
func (b *bulkReplay) finish(ctx context.Context, checkpoint int64, at time.Time) (err error) {
	s := b.s
	defer func() {
		if err != nil {
			s.DropCache() // the commit's outcome is unknown
		}
	}()
	h := make(cursors, 0, len(b.runs))
	defer func() {
		for _, c := range h {
			c.f.Close()
		}
	}()
	for i, path := range b.runs {
		f, err := os.Open(path)
		if err != nil {
			return fmt.Errorf("state: bulk replay: %w", err)
		}
		c := &cursor{f: f, r: bufio.NewReaderSize(f, 1<<16), run: i}
		h = append(h, c)
		if ok, err := c.next(); err != nil {
			return err
		} else if !ok {
			h = h[:len(h)-1]
			f.Close()
		}
	}
	heap.Init(&h)
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("state: begin: %w", err)
	}
	defer tx.Rollback()
	// The key filter knows none of the keys written here: it is built
	// again from the file when next needed.
	s.dropFilter()
	s.DropCache()
	const chunk = 64 * rowsPerStmt
	muts := make([]protocol.Mutation, 0, chunk)
	var last []byte
	for first := true; len(h) > 0; first = false {
		c := h[0]
		if first || !bytes.Equal(c.key, last) {
			// The newest write of the key: older runs' come after it.
			last = append(last[:0], c.key...)
			if !c.delete {
				muts = append(muts, protocol.Mutation{Key: string(c.key), Value: bytes.Clone(c.value)})
			}
		}
		if ok, err := c.next(); err != nil {
			return err
		} else if ok {
			heap.Fix(&h, 0)
		} else {
			c.f.Close()
			heap.Pop(&h)
		}
		if len(muts) == chunk || (len(h) == 0 && len(muts) > 0) {
			if err := s.write(ctx, tx, muts); err != nil {
				return err
			}
			clear(muts)
			muts = muts[:0]
		}
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
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("state: commit: %w", err)
	}
	s.checkpoint, s.cpTime = cp, cpTime
	return nil
}

// close ends the replay and removes its scratch files.
func (b *bulkReplay) close() {
	_ = os.RemoveAll(b.dir) // what is left is removed by the next replay
}
