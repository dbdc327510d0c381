package protocol

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestSortMutationsMatchesKeyOrder: keys that share long prefixes, differ
// only past byte 16, end in zero bytes or are prefixes of each other sort
// exactly as strings.Compare orders them, every mutation keeps its value,
// and writes of one key keep their order.
func TestSortMutationsMatchesKeyOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	alphabet := []byte{0, 1, 'a', 'b', 0x7f, 0x80, 0xff}
	for n := range 400 {
		seen := map[string]bool{}
		var ms []Mutation
		for range n % 97 {
			var k []byte
			if r.IntN(2) == 0 {
				k = append(k, "\x02shared-prefix-of-"...) // 18 bytes: ties on the first 16
			}
			for range r.IntN(20) {
				k = append(k, alphabet[r.IntN(len(alphabet))])
			}
			if seen[string(k)] && r.IntN(2) == 0 {
				continue // some keys are written twice or more, most once
			}
			seen[string(k)] = true
			ms = append(ms, Mutation{Key: string(k), Value: []byte(string(k) + "=v" + strconv.Itoa(len(ms))), Delete: r.IntN(5) == 0})
		}
		want := slices.Clone(ms)
		slices.SortStableFunc(want, func(x, y Mutation) int { return strings.Compare(x.Key, y.Key) })
		SortMutations(ms)
		for i := range ms {
			if ms[i].Key != want[i].Key || string(ms[i].Value) != string(want[i].Value) || ms[i].Delete != want[i].Delete {
				t.Fatalf("n=%d: position %d holds %q, want %q", n, i, ms[i].Key, want[i].Key)
			}
		}
	}
}

func TestKeyPrefixOrder(t *testing.T) {
	for _, c := range []struct{ a, b string }{
		{"", "\x00"},
		{"ab", "ab\x00"},
		{"ab\x00", "ab\x01"},
		{"abcdefghijklmnop", "abcdefghijklmnopq"},
		{"\x7f", "\x80"},
		{"a\xff", "b"},
	} {
		ah, al := keyPrefix(c.a)
		bh, bl := keyPrefix(c.b)
		if ah > bh || (ah == bh && al > bl) {
			t.Errorf("prefix of %q sorts after the prefix of %q", c.a, c.b)
		}
	}
}
