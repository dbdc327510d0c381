package state

// The committed-value cache: values the steps read from the file, and the
// file's answer for keys it does not hold, bounded in bytes. It never holds
// a value that is not committed to the file: reads fill it, and a commit
// updates the keys it holds only after SQLite committed (Store.Apply).

// DefaultCacheBytes is the committed-value cache of a store opened without
// CacheBytes: 32 MiB.
const DefaultCacheBytes = 32 << 20

// entryOverhead is what one cached key costs besides its key and value
// bytes: its slot, its map entry and the string and slice headers. It is
// an estimate that errs high, so the bound holds.
const entryOverhead = 112

// Option configures Open.
type Option func(*options)

type options struct{ cacheBytes int64 }

// CacheBytes bounds the store's cache of committed values to about n bytes
// of keys, values and bookkeeping; n <= 0 turns the cache off. SQLite's own
// page cache is a quarter of it, at least 2 MiB, so a store's memory is
// about 1.25 n plus what its caller holds in memory (a stage task holds
// its unwritten writes, another quarter: Config.StateCache).
func CacheBytes(n int64) Option { return func(o *options) { o.cacheBytes = n } }

// CacheLimit returns the bound of the store's cache of committed values in
// bytes (CacheBytes); 0 when the cache is off.
func (s *Store) CacheLimit() int64 { return max(s.cacheBytes, 0) }

// pageCacheKiB is SQLite's page cache for a value cache of n bytes, in KiB.
func pageCacheKiB(n int64) int64 { return max(n/4, 2<<20) >> 10 }

// restoreCacheKiB is SQLite's page cache while a restore replays the
// changelog into a store whose value cache is n bytes, in KiB: the whole
// of n, which the value cache does not use meanwhile (replaySpace).
func restoreCacheKiB(n int64) int64 { return max(n, 2<<20) >> 10 }

// valueCache is a CLOCK cache: a hit sets the slot's reference bit, and
// eviction sweeps the slots, sparing each referenced one once. That keeps
// what the steps keep touching at the cost of a bit per hit, where an LRU
// list would cost a pointer move.
type valueCache struct {
	limit int64 // bytes; <= 0: off
	used  int64
	idx   map[string]int32
	slots []slot
	free  []int32
	hand  int
}

type slot struct {
	key       string
	v         []byte // kept by the cache; handed out only as copies
	ok        bool   // false: the file holds no such key
	ref, live bool
}

func (s *slot) cost() int64 { return int64(len(s.key)+cap(s.v)) + entryOverhead }

// get returns key's cached value as a copy the caller owns (a fold may
// decode state into a type that aliases it).
func (c *valueCache) get(key string) (v []byte, ok, hit bool) {
	i, hit := c.idx[key]
	if !hit {
		return nil, false, false
	}
	s := &c.slots[i]
	s.ref = true
	if !s.ok {
		return nil, false, true
	}
	return append([]byte{}, s.v...), true, true
}

func (c *valueCache) has(key string) bool {
	_, hit := c.idx[key]
	return hit
}

// put caches key's committed value (or its absence), evicting as needed.
// A value larger than the whole bound is not cached.
func (c *valueCache) put(key string, v []byte, ok bool) {
	if c.limit <= 0 {
		return
	}
	if i, hit := c.idx[key]; hit {
		c.set(&c.slots[i], v, ok)
		c.evict()
		return
	}
	n := int64(len(key)+len(v)) + entryOverhead
	if n > c.limit {
		return
	}
	for c.used+n > c.limit && c.drop() {
	}
	if c.idx == nil {
		c.idx = make(map[string]int32)
	}
	var i int32
	if k := len(c.free); k > 0 {
		i, c.free = c.free[k-1], c.free[:k-1]
	} else {
		c.slots = append(c.slots, slot{})
		i = int32(len(c.slots) - 1)
	}
	s := &c.slots[i]
	*s = slot{key: key, live: true}
	c.used += s.cost()
	c.set(s, v, ok)
	c.idx[key] = i
}

// update brings a cached key up to a committed write; keys not cached stay
// out (a restore's replay does not fill the cache).
func (c *valueCache) update(key string, v []byte, ok bool) {
	if i, hit := c.idx[key]; hit {
		c.set(&c.slots[i], v, ok)
	}
}

func (c *valueCache) set(s *slot, v []byte, ok bool) {
	c.used -= s.cost()
	if ok {
		s.v = append(s.v[:0], v...) // the slot's own buffer: never handed out
	} else {
		s.v = nil
	}
	s.ok = ok
	c.used += s.cost()
}

// evict drops entries until the cache is within its bound again.
func (c *valueCache) evict() {
	for c.used > c.limit && c.drop() {
	}
}

// drop evicts one entry by the clock; false when the cache is empty.
func (c *valueCache) drop() bool {
	if len(c.idx) == 0 {
		return false
	}
	for {
		if c.hand >= len(c.slots) {
			c.hand = 0
		}
		s := &c.slots[c.hand]
		c.hand++
		if !s.live {
			continue
		}
		if s.ref {
			s.ref = false
			continue
		}
		c.used -= s.cost()
		delete(c.idx, s.key)
		*s = slot{}
		c.free = append(c.free, int32(c.hand-1))
		return true
	}
}

func (c *valueCache) len() int { return len(c.idx) }

// reset forgets every entry.
func (c *valueCache) reset() {
	clear(c.idx)
	c.slots, c.free, c.used, c.hand = c.slots[:0], c.free[:0], 0, 0
}

// drop1 forgets key if cached.
func (c *valueCache) drop1(key string) {
	i, hit := c.idx[key]
	if !hit {
		return
	}
	s := &c.slots[i]
	c.used -= s.cost()
	delete(c.idx, key)
	*s = slot{}
	c.free = append(c.free, i)
}
