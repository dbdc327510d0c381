package observer

import (
	"errors"
	"slices"
	"testing"
)

// FuzzBlockPairs decodes a claim block's and a sequence block's pairs from
// any bytes, as a damaged store file could hold them: a decoder either
// fails with its corruption error or returns pairs that encode and decode
// back to themselves. It never panics.
func FuzzBlockPairs(f *testing.F) {
	f.Add(int64(0), encodeClaimPairs(0, []claimPair{{1, 7}, {3, 9}}))
	f.Add(int64(100), encodeSeqPairs(100, []seqPair{{100, 5, 7}, {101, 6, 8}, {140, 90, 20}}))
	f.Add(int64(-1), []byte{0x80})
	f.Add(int64(5), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x00})
	f.Fuzz(func(t *testing.T, lo int64, b []byte) {
		claims, err := decodeClaimPairs(nil, lo, b)
		if err != nil {
			if !errors.Is(err, errCorruptClaims) {
				t.Fatalf("claim pairs %x: error %v is not errCorruptClaims", b, err)
			}
		} else if again, err := decodeClaimPairs(nil, lo, encodeClaimPairs(lo, claims)); err != nil || !slices.Equal(again, claims) {
			t.Fatalf("claim pairs %x: %v re-decode to %v (%v)", b, claims, again, err)
		}
		seqs, err := decodeSeqPairs(nil, lo, b)
		if err != nil {
			if !errors.Is(err, errCorruptSeqs) {
				t.Fatalf("sequence pairs %x: error %v is not errCorruptSeqs", b, err)
			}
		} else if again, err := decodeSeqPairs(nil, lo, encodeSeqPairs(lo, seqs)); err != nil || !slices.Equal(again, seqs) {
			t.Fatalf("sequence pairs %x: %v re-decode to %v (%v)", b, seqs, again, err)
		}
	})
}
