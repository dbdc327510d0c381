package protocol

import (
	"cmp"
	"encoding/binary"
	"math"
	"slices"
	"strings"
)

// SortMutations sorts ms by key, in place; mutations with equal keys keep
// their order (a host that replays writes can keep the last of each key).
//
// A host sorts tens of thousands of keys at a time (a step's writes for
// its changelog, committed steps' writes for its store), and those keys'
// bytes are spread over the heap: a comparison that reads them is a cache
// miss or two. So each key's first 16 bytes are held beside its index as
// two integers, and only keys that agree on those are compared in full.
func SortMutations(ms []Mutation) {
	if len(ms) < 2 {
		return
	}
	if len(ms) > math.MaxInt32 {
		slices.SortStableFunc(ms, func(x, y Mutation) int { return strings.Compare(x.Key, y.Key) })
		return
	}
	type entry struct {
		hi, lo uint64
		i      int32
	}
	es := make([]entry, len(ms))
	for i := range ms {
		hi, lo := keyPrefix(ms[i].Key)
		es[i] = entry{hi, lo, int32(i)}
	}
	slices.SortFunc(es, func(a, b entry) int {
		if c := cmp.Compare(a.hi, b.hi); c != 0 {
			return c
		}
		if c := cmp.Compare(a.lo, b.lo); c != 0 {
			return c
		}
		if c := strings.Compare(ms[a.i].Key, ms[b.i].Key); c != 0 {
			return c
		}
		return cmp.Compare(a.i, b.i)
	})
	sorted := make([]Mutation, len(ms))
	for j, e := range es {
		sorted[j] = ms[e.i]
	}
	copy(ms, sorted)
}

// keyPrefix is key's first 16 bytes, padded with zeros, as two big-endian
// integers. Their order agrees with the keys': a shorter key that is a
// prefix of a longer one pads with zeros where the longer one has bytes
// at least zero, and keys whose prefixes tie are compared in full.
func keyPrefix(key string) (hi, lo uint64) {
	var b [16]byte
	copy(b[:], key)
	return binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
}
