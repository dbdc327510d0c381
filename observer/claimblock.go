package observer

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"slices"
	"strconv"
)

// Offset claims are indexed in blocks rather than one B-tree row per
// claim: a stage whose every input advances writes as many changed
// claims as its stamp has entries, and a row per claim made SQLite's
// B-tree the cost of ingest. A block gathers the claims that one
// channel's consecutive records make on one claimed channel — up to
// claimBlockPairs of them, within one ingest batch, their values no more
// than claimSpan apart — into one row keyed by (claimed channel, lowest
// value). Every lookup by claimed value v reads the blocks whose lowest
// value lies in v-claimSpan..v, a bounded range of the key, and keeps the
// pairs that match exactly: queries see the same (channel, value, record)
// triples a row per claim would hold.
const (
	claimBlockPairs = 64
	claimSpan       = 256
)

// claimPair is one indexed claim: record rec claims value.
type claimPair struct{ value, rec int64 }

// claimBlock is a block being filled during one ingest batch.
type claimBlock struct {
	src    int64 // the channel of the claiming records
	ch     int64 // the claimed channel
	lo, hi int64
	pairs  []claimPair
}

// blockKey names the open block of claims that records of channel from
// make on channel to.
type blockKey struct{ from, to int64 }

// claim adds record rec's claim of value on channel to, made by a record
// of channel from, closing the open block first if the claim does not fit.
func (w *writer) claim(from, to, value, rec int64) {
	k := blockKey{from, to}
	b, ok := w.blocks[k]
	if ok && (len(b.pairs) == claimBlockPairs || max(b.hi, value)-min(b.lo, value) > claimSpan) {
		w.closed = append(w.closed, b)
		ok = false
	}
	if !ok {
		b = &claimBlock{src: from, ch: to, lo: value, hi: value}
		w.blocks[k] = b
	}
	b.lo, b.hi = min(b.lo, value), max(b.hi, value)
	b.pairs = append(b.pairs, claimPair{value, rec})
}

// blockArgs closes every open block and returns the claims rows' values,
// in key order so the B-tree inserts land next to each other.
func (w *writer) blockArgs(args []any) []any {
	for _, b := range w.blocks {
		w.closed = append(w.closed, b)
	}
	clear(w.blocks)
	slices.SortFunc(w.closed, func(a, b *claimBlock) int {
		return cmp.Or(cmp.Compare(a.ch, b.ch), cmp.Compare(a.lo, b.lo), cmp.Compare(a.pairs[0].rec, b.pairs[0].rec))
	})
	for _, b := range w.closed {
		args = append(args, b.ch, b.lo, b.pairs[0].rec, b.hi, b.pairs[len(b.pairs)-1].rec, encodeClaimPairs(b.lo, b.pairs), b.src)
	}
	w.closed = w.closed[:0]
	return args
}

// encodeClaimPairs writes pairs, in record order, as uvarint value - lo
// and uvarint record id - previous record id (the first against 0).
func encodeClaimPairs(lo int64, pairs []claimPair) []byte {
	buf := make([]byte, 0, 4*len(pairs))
	var prev int64
	for _, p := range pairs {
		buf = binary.AppendUvarint(buf, uint64(p.value-lo))
		buf = binary.AppendUvarint(buf, uint64(p.rec-prev))
		prev = p.rec
	}
	return buf
}

// decodeClaimPairs appends the pairs encoded in b to dst.
func decodeClaimPairs(dst []claimPair, lo int64, b []byte) ([]claimPair, error) {
	var prev int64
	for len(b) > 0 {
		dv, n := binary.Uvarint(b)
		if n <= 0 {
			return dst, errCorruptClaims
		}
		b = b[n:]
		dr, n := binary.Uvarint(b)
		if n <= 0 {
			return dst, errCorruptClaims
		}
		b = b[n:]
		prev += int64(dr)
		dst = append(dst, claimPair{lo + int64(dv), prev})
	}
	return dst, nil
}

// claimRange is the condition on a claims row c that it may hold a value
// in lo..hi (inclusive; the arguments are lo - claimSpan, hi, lo):
// blocks are at most claimSpan wide, so the search is a bounded range of
// the (ch, lo) key.
const claimRange = `c.lo BETWEEN ? AND ? AND c.hi >= ?`

func claimRangeArgs(lo, hi int64) []any { return []any{lo - claimSpan, hi, lo} }

// claimers returns the records indexed as claiming value on the channel
// with store id ch, in record order.
func claimers(ctx context.Context, q querier, ch, value int64) ([]int64, error) {
	rows, err := q.QueryContext(ctx, `SELECT c.lo, c.pairs FROM claims c WHERE c.ch = ? AND `+claimRange,
		append([]any{ch}, claimRangeArgs(value, value)...)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var recs []int64
	var pairs []claimPair
	for rows.Next() {
		var lo int64
		var b []byte
		if err := rows.Scan(&lo, &b); err != nil {
			return nil, err
		}
		if pairs, err = decodeClaimPairs(pairs[:0], lo, b); err != nil {
			return nil, err
		}
		for _, p := range pairs {
			if p.value == value {
				recs = append(recs, p.rec)
			}
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.Sort(recs)
	return recs, nil
}

// pruneClaims drops the claims of records below cut: whole blocks, and
// the pruned pairs of the few blocks straddling cut.
func pruneClaims(ctx context.Context, tx *sql.Tx, cut int64) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM claims WHERE last < ?`, cut); err != nil {
		return err
	}
	rows, err := tx.QueryContext(ctx, `SELECT ch, lo, rec, pairs, src FROM claims WHERE rec < ?`, cut)
	if err != nil {
		return err
	}
	type straddler struct {
		ch, lo, rec int64
		pairs       []claimPair
		src         sql.NullInt64
	}
	var ss []straddler
	for rows.Next() {
		var s straddler
		var b []byte
		if err := rows.Scan(&s.ch, &s.lo, &s.rec, &b, &s.src); err != nil {
			rows.Close()
			return err
		}
		if s.pairs, err = decodeClaimPairs(nil, s.lo, b); err != nil {
			rows.Close()
			return err
		}
		ss = append(ss, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, s := range ss {
		if _, err := tx.ExecContext(ctx, `DELETE FROM claims WHERE ch = ? AND lo = ? AND rec = ?`, s.ch, s.lo, s.rec); err != nil {
			return err
		}
		kept := slices.DeleteFunc(s.pairs, func(p claimPair) bool { return p.rec < cut })
		if len(kept) == 0 {
			continue
		}
		lo, hi := kept[0].value, kept[0].value
		for _, p := range kept {
			lo, hi = min(lo, p.value), max(hi, p.value)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO claims(ch, lo, rec, hi, last, pairs, src) VALUES(?, ?, ?, ?, ?, ?, ?)`,
			s.ch, lo, kept[0].rec, hi, kept[len(kept)-1].rec, encodeClaimPairs(lo, kept), s.src); err != nil {
			return err
		}
	}
	return nil
}

// errCorruptClaims is wrapped when a claims row of the store does not parse.
var errCorruptClaims = errors.New("corrupt claim block in store")

// jsonInts renders ids as a JSON array, for json_each: one statement text
// however many ids.
func jsonInts(ids []int64) string {
	b := []byte{'['}
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendInt(b, id, 10)
	}
	return string(append(b, ']'))
}
