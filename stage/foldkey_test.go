package stage

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/parsley-go/parsley/internal/state"
)

// TestFoldKeyCacheMatchesFoldKey: for nil, empty, binary, repeated, long
// and more distinct keys than the cache holds, the cache answers what
// state.FoldKey answers, keeps its bounds, and does not alias the caller's key
// bytes (a fetch buffer the client reuses). (Checked by breaking it: a
// cache that keyed by the unprefixed string, or kept no bound, fails.)
func TestFoldKeyCacheMatchesFoldKey(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var c foldKeyCache
	pool := [][]byte{nil, {}, {0}, {1}, {2}, []byte("\x02a"), []byte("a")}
	huge := bytes.Repeat([]byte{'x'}, foldKeyCacheBytes) // its fold key is past the bound: never cached
	for i := range 100_000 {
		var key []byte
		switch r := rng.IntN(1000); {
		case r == 0:
			key = huge
		case r < 300:
			key = pool[rng.IntN(len(pool))]
		case r < 320:
			key = make([]byte, 1<<10+rng.IntN(60<<10)) // long: the byte bound, not the key bound, starts over
			key[0], key[1] = byte(i), byte(i>>8)
		default:
			key = make([]byte, rng.IntN(12))
			for j := range key {
				key[j] = byte(rng.IntN(4)) // few distinct bytes: many repeats
			}
			if rng.IntN(2) == 0 {
				key = append(key, byte(i), byte(i>>8), byte(i>>16))
			}
		}
		buf := bytes.Clone(key)
		if key == nil {
			buf = nil
		}
		want := state.FoldKey(key)
		got := c.of(buf)
		for j := range buf {
			buf[j] ^= 0xff // the client reuses its buffer
		}
		if got != want {
			t.Fatalf("key %d %q: fold key %q, want %q", i, key, got, want)
		}
		if c.of(key) != want {
			t.Fatalf("key %d %q: second fold key differs", i, key)
		}
		if len(c.m) > foldKeyCacheKeys || c.bytes > foldKeyCacheBytes {
			t.Fatalf("key %d: cache holds %d keys, %d bytes; bounds %d, %d", i, len(c.m), c.bytes, foldKeyCacheKeys, foldKeyCacheBytes)
		}
		if i%1000 != 0 {
			continue
		}
		n := 0
		for k, v := range c.m {
			n += len(v)
			if v != state.FoldKey([]byte(k)) {
				t.Fatalf("key %d: cache maps %q to %q", i, k, v)
			}
		}
		if n != c.bytes {
			t.Fatalf("key %d: cache counts %d bytes, holds %d", i, c.bytes, n)
		}
	}
}
