package state

// The key filter: a Bloom filter over every key the file may hold, so that
// a read of a key the file has never held costs no query. A fold over a
// growing key space reads a new key per record, and a query that finds
// nothing cost as much as one that finds a value (docs/performance.md,
// "State store").
//
// It must never answer "absent" for a key the file holds: a fold would
// then start that key over from its zero state and the changelog would
// carry the loss. So it only ever grows between rebuilds: it is built from
// a scan of the file's keys, every put of every Apply is added before
// SQLite writes it (a failed Apply leaves keys the file may not hold,
// which only cost a query), deletes leave it as it is, and Reset, the only
// other writer of the file, drops it. A Store is the file's only writer
// while it is open (a task's store and its standby's are never open at
// once), so nothing writes around it.

import (
	"context"
	"database/sql"
	"hash/maphash"
	"math/bits"

	"github.com/parsley-go/parsley/protocol"
)

const (
	// filterBitsPerKey sizes a layer: at 16 bits a key and 4 bits a key
	// in one word, a full layer answers "maybe" for about 0.3% of the keys
	// it does not hold.
	filterBitsPerKey = 16
	filterMinBytes   = 64 << 10
)

// keyFilter is a scalable Bloom filter: layers of doubling size, the
// newest taking the new keys; a key may be held if any layer says so.
// Each key sets 4 bits of one 64-bit word (a register-blocked filter: one
// memory access per layer).
type keyFilter struct {
	seed     maphash.Seed
	layers   []filterLayer
	maxBytes int64 // no new layer past this total
}

type filterLayer struct {
	words []uint64 // a power of two of them
	shift uint     // 64 - log2(len(words))
	keys  int      // keys added that it did not already hold
}

func newFilterLayer(bytes int64) filterLayer {
	n := max(bytes/8, 1)
	n = 1 << (63 - bits.LeadingZeros64(uint64(n))) // round down to a power of two
	return filterLayer{words: make([]uint64, n), shift: uint(64 - bits.TrailingZeros64(uint64(n)))}
}

func (l *filterLayer) full() bool { return l.keys*filterBitsPerKey >= len(l.words)*64 }

func (l *filterLayer) probe(h uint64) (int, uint64) {
	return int(h >> l.shift), 1<<(h&63) | 1<<(h>>6&63) | 1<<(h>>12&63) | 1<<(h>>18&63)
}

// newKeyFilter returns an empty filter whose first layer holds expect keys
// and takes at least filterMinBytes and an eighth of maxBytes, at most
// maxBytes: a state that grows from empty then needs three layers (an
// eighth, a quarter, a half), and a probe touches a word in each. Past
// that the last layer takes every new key, and answers "may hold" more
// often.
func newKeyFilter(expect int, maxBytes int64) *keyFilter {
	size := max(int64(expect)*filterBitsPerKey/8, filterMinBytes, maxBytes/8)
	size = min(size, max(maxBytes, 8))
	f := &keyFilter{seed: maphash.MakeSeed(), maxBytes: maxBytes}
	f.layers = append(f.layers, newFilterLayer(size))
	return f
}

func (f *keyFilter) bytes() int64 {
	var n int64
	for i := range f.layers {
		n += int64(len(f.layers[i].words)) * 8
	}
	return n
}

// mayHold reports whether key may be in the file; false is certain.
func (f *keyFilter) mayHold(key string) bool {
	h := maphash.String(f.seed, key)
	for i := range f.layers {
		l := &f.layers[i]
		w, m := l.probe(h)
		if l.words[w]&m == m {
			return true
		}
	}
	return false
}

// add records that the file may hold key. It reports whether the filter
// grew a layer (its memory changed).
func (f *keyFilter) add(key string) (grew bool) {
	h := maphash.String(f.seed, key)
	for i := range f.layers {
		l := &f.layers[i]
		w, m := l.probe(h)
		if l.words[w]&m == m {
			return false
		}
	}
	l := &f.layers[len(f.layers)-1]
	if l.full() {
		if next := int64(len(l.words)) * 16; f.bytes()+next <= f.maxBytes {
			f.layers = append(f.layers, newFilterLayer(next))
			l, grew = &f.layers[len(f.layers)-1], true
		}
	}
	w, m := l.probe(h)
	l.words[w] |= m
	l.keys++
	return grew
}

// filterMax is the most a store's key filter may take of its cache bound:
// an eighth, which the value cache gives up as the filter grows.
func filterMax(cacheBytes int64) int64 { return cacheBytes / 8 }

// filterScanKeys is how many of the file's keys one Prefetch adds to a
// filter being built: a large restored file is scanned over many steps, so
// no step pays for the whole scan (10,000,000 keys would take seconds, and
// a step that timed out would retry the same scan).
const filterScanKeys = 1 << 16

// scanFilter adds the next filterScanKeys of the file's keys, in key
// order, to the filter being built (starting one if there is none) and
// marks it complete at the file's last key. Keys written meanwhile are
// added by Apply whether their range is scanned yet or not, and a key
// deleted before its range is scanned is not in the file, so a complete
// filter holds every key the file holds. Until it is complete the store
// queries every key it has not cached.
func (s *Store) scanFilter(ctx context.Context) error {
	if s.filter == nil {
		s.filter = newKeyFilter(0, filterMax(s.cacheBytes))
		s.filterFrom, s.filterBuilt = nil, false
		s.filterResized()
	}
	var rows *sql.Rows
	var err error
	if s.filterFrom == nil {
		rows, err = s.db.QueryContext(ctx, "SELECT k FROM kv ORDER BY k LIMIT ?", filterScanKeys)
	} else {
		rows, err = s.db.QueryContext(ctx, "SELECT k FROM kv WHERE k > ? ORDER BY k LIMIT ?", s.filterFrom, filterScanKeys)
	}
	if err != nil {
		return err
	}
	defer rows.Close()
	n, grew := 0, false
	var k []byte
	for rows.Next() {
		if err := rows.Scan(&k); err != nil {
			return err
		}
		if s.filter.add(string(k)) {
			grew = true
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if grew {
		s.filterResized()
	}
	if n < filterScanKeys {
		s.filterBuilt, s.filterFrom = true, nil
		return nil
	}
	s.filterFrom = append(s.filterFrom[:0], k...)
	return nil
}

// filterResized gives the value cache what the filter does not take of the
// store's cache bound.
func (s *Store) filterResized() {
	limit := s.cacheBytes
	if s.filter != nil {
		limit -= s.filter.bytes()
	}
	s.cache.limit = max(limit, 0)
	s.cache.evict()
}

// mayHold reports whether the file may hold key: true unless the filter is
// complete and certain it does not.
func (s *Store) mayHold(key string) bool {
	return !s.filterBuilt || s.filter.mayHold(key)
}

// dropFilter forgets the filter; the next Prefetch starts building anew.
func (s *Store) dropFilter() {
	s.filter, s.filterFrom, s.filterBuilt = nil, nil, false
	s.filterResized()
}

// filterPuts adds muts' puts to the filter, complete or being built,
// before they are written.
func (s *Store) filterPuts(muts []protocol.Mutation) {
	if s.filter == nil {
		return
	}
	grew := false
	for i := range muts {
		if !muts[i].Delete && s.filter.add(muts[i].Key) {
			grew = true
		}
	}
	if grew {
		s.filterResized()
	}
}
