package observer

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"math"
	"slices"
)

// A sender's records on a channel are indexed by sequence number in blocks,
// as claims are (claimblock.go): an index row per tagged record — every
// record a stage writes is tagged — was a sixth of the cost of ingest. A
// block gathers one sender's consecutive records on one channel within an
// ingest batch, up to seqBlockPairs of them with sequence numbers no more
// than seqSpan apart, as (sequence, offset, record) triples, keyed by the
// channel, the sender and the lowest sequence number. A lookup of sequence
// v reads the blocks whose lowest number lies in v-seqSpan..v.
const (
	seqBlockPairs = 64
	seqSpan       = 256
)

// seqPair is one indexed record: record rec, at off, has sequence seq.
type seqPair struct{ seq, off, rec int64 }

// seqBlock is a block being filled during one ingest batch.
type seqBlock struct {
	ch, sender int64
	lo, hi     int64
	pairs      []seqPair
}

// sequence indexes record rec at off of sender on channel ch, closing the
// open block first if the record does not fit.
func (w *writer) sequence(ch, sender, seq, off, rec int64) {
	k := senderKey{ch, sender}
	b, ok := w.seqBlocks[k]
	if ok && (len(b.pairs) == seqBlockPairs || max(b.hi, seq)-min(b.lo, seq) > seqSpan) {
		w.seqClosed = append(w.seqClosed, b)
		ok = false
	}
	if !ok {
		b = &seqBlock{ch: ch, sender: sender, lo: seq, hi: seq}
		w.seqBlocks[k] = b
	}
	b.lo, b.hi = min(b.lo, seq), max(b.hi, seq)
	b.pairs = append(b.pairs, seqPair{seq, off, rec})
}

// seqBlockArgs closes every open block and returns the seqs rows' values,
// in key order.
func (w *writer) seqBlockArgs(args []any) []any {
	for _, b := range w.seqBlocks {
		w.seqClosed = append(w.seqClosed, b)
	}
	clear(w.seqBlocks)
	slices.SortFunc(w.seqClosed, func(a, b *seqBlock) int {
		return cmp.Or(cmp.Compare(a.ch, b.ch), cmp.Compare(a.sender, b.sender), cmp.Compare(a.lo, b.lo), cmp.Compare(a.pairs[0].rec, b.pairs[0].rec))
	})
	for _, b := range w.seqClosed {
		last := b.pairs[len(b.pairs)-1]
		args = append(args, b.ch, b.sender, b.lo, b.pairs[0].rec, b.hi, last.rec, last.off, encodeSeqPairs(b.lo, b.pairs))
	}
	w.seqClosed = w.seqClosed[:0]
	return args
}

// seqInsert lists the seqs columns in the order seqBlockArgs gives them.
const seqInsert = `INSERT INTO seqs(ch, sender, lo, first, hi, last, last_off, pairs) VALUES `

// seqCols is the number of seqs columns seqInsert lists.
const seqCols = 8

// encodeSeqPairs writes pairs, in record order, as uvarint seq - lo,
// uvarint offset - previous offset and uvarint record - previous record
// (the first of each against 0).
func encodeSeqPairs(lo int64, pairs []seqPair) []byte {
	buf := make([]byte, 0, 6*len(pairs))
	var off, rec int64
	for _, p := range pairs {
		buf = binary.AppendUvarint(buf, uint64(p.seq-lo))
		buf = binary.AppendUvarint(buf, uint64(p.off-off))
		buf = binary.AppendUvarint(buf, uint64(p.rec-rec))
		off, rec = p.off, p.rec
	}
	return buf
}

// errCorruptSeqs is wrapped when a seqs row of the store does not parse.
var errCorruptSeqs = errors.New("corrupt sequence block in store")

// decodeSeqPairs appends the pairs encoded in b to dst.
func decodeSeqPairs(dst []seqPair, lo int64, b []byte) ([]seqPair, error) {
	var off, rec int64
	for len(b) > 0 {
		var v [3]uint64
		for i := range v {
			x, n := binary.Uvarint(b)
			if n <= 0 || x > math.MaxInt64 {
				return dst, errCorruptSeqs
			}
			v[i], b = x, b[n:]
		}
		off, rec = off+int64(v[1]), rec+int64(v[2])
		dst = append(dst, seqPair{lo + int64(v[0]), off, rec})
	}
	return dst, nil
}

// seqPairsFrom reads the pairs of the blocks q selects (lo, pairs) and
// keeps those keep accepts.
func seqPairsFrom(ctx context.Context, db querier, keep func(seqPair) bool, q string, args ...any) ([]seqPair, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out, pairs []seqPair
	for rows.Next() {
		var lo int64
		var b []byte
		if err := rows.Scan(&lo, &b); err != nil {
			return nil, err
		}
		if pairs, err = decodeSeqPairs(pairs[:0], lo, b); err != nil {
			return nil, err
		}
		for _, p := range pairs {
			if keep(p) {
				out = append(out, p)
			}
		}
	}
	return out, rows.Err()
}

// sequenced returns the records of sender (store id) on channel ch (store
// id) with sequence seq, in record order.
func sequenced(ctx context.Context, db querier, ch, sender, seq int64) ([]seqPair, error) {
	ps, err := seqPairsFrom(ctx, db, func(p seqPair) bool { return p.seq == seq },
		`SELECT lo, pairs FROM seqs WHERE ch = ? AND sender = ? AND lo BETWEEN ? AND ? AND hi >= ?`, ch, sender, seq-seqSpan, seq, seq)
	slices.SortFunc(ps, func(a, b seqPair) int { return cmp.Compare(a.rec, b.rec) })
	return ps, err
}

// firstAtOrAbove returns the lowest offset of a record of sender on channel
// ch (store ids) whose sequence is seq or more, and whether there is one.
func firstAtOrAbove(ctx context.Context, db querier, ch, sender, seq int64) (int64, bool, error) {
	ps, err := seqPairsFrom(ctx, db, func(p seqPair) bool { return p.seq >= seq },
		`SELECT lo, pairs FROM seqs WHERE ch = ? AND sender = ? AND lo >= ? AND hi >= ?`, ch, sender, seq-seqSpan, seq)
	if err != nil || len(ps) == 0 {
		return 0, false, err
	}
	return slices.MinFunc(ps, func(a, b seqPair) int { return cmp.Compare(a.off, b.off) }).off, true, nil
}

// pruneSeqs drops the sequence index of records below cut: whole blocks,
// and the pruned pairs of the few blocks straddling cut.
func pruneSeqs(ctx context.Context, tx *sql.Tx, cut int64) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM seqs WHERE last < ?`, cut); err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, `SELECT ch, sender, lo, first, pairs FROM seqs WHERE first < ?`, cut)
	if err != nil {
		return err
	}
	var ss []*seqBlock
	var firsts []int64
	for rows.Next() {
		s := new(seqBlock)
		var first int64
		var b []byte
		if err := rows.Scan(&s.ch, &s.sender, &s.lo, &first, &b); err != nil {
			rows.Close()
			return err
		}
		if s.pairs, err = decodeSeqPairs(nil, s.lo, b); err != nil {
			rows.Close()
			return err
		}
		ss, firsts = append(ss, s), append(firsts, first)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for i, s := range ss {
		if _, err := tx.ExecContext(ctx, `DELETE FROM seqs WHERE ch = ? AND sender = ? AND lo = ? AND first = ?`, s.ch, s.sender, s.lo, firsts[i]); err != nil {
			return err
		}
		kept := slices.DeleteFunc(s.pairs, func(p seqPair) bool { return p.rec < cut })
		if len(kept) == 0 {
			continue
		}
		lo, hi := kept[0].seq, kept[0].seq
		for _, p := range kept {
			lo, hi = min(lo, p.seq), max(hi, p.seq)
		}
		last := kept[len(kept)-1]
		if _, err := tx.ExecContext(ctx, seqInsert+`(?, ?, ?, ?, ?, ?, ?, ?)`,
			s.ch, s.sender, lo, kept[0].rec, hi, last.rec, last.off, encodeSeqPairs(lo, kept)); err != nil {
			return err
		}
	}
	return nil
}

// buildSeqs indexes the tagged records a store holds, for a store written
// before the index was kept in blocks (migrate4).
func buildSeqs(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT ch, sender, seq, off, id FROM records WHERE tagged ORDER BY ch, sender, id`)
	if err != nil {
		return err
	}
	w := &writer{seqBlocks: map[senderKey]*seqBlock{}}
	for rows.Next() {
		var ch, sender, seq, off, id int64
		if err := rows.Scan(&ch, &sender, &seq, &off, &id); err != nil {
			rows.Close()
			return err
		}
		w.sequence(ch, sender, seq, off, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	args := w.seqBlockArgs(nil)
	for len(args) > 0 {
		if _, err := tx.ExecContext(ctx, seqInsert+placeholders(1, seqCols), args[:seqCols]...); err != nil {
			return err
		}
		args = args[seqCols:]
	}
	return nil
}
