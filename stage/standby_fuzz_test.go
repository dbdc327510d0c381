package stage

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"
)

// FuzzStandbyUserData: the join and assignment user data come from other
// members, possibly of other releases. Decoding any bytes must not panic;
// a refusal is errStandbyUserData; what decodes re-encodes to the same
// bytes, so two members never read one plan differently.
func FuzzStandbyUserData(f *testing.F) {
	f.Add(appendPartitions(nil, []int32{0, 3, 7}))
	f.Add(appendPartitions(nil, nil))
	f.Add(appendPartitions(binary.AppendUvarint([]byte{standbyUserDataVersion}, 1), []int32{2}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Add([]byte{2, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		ps, err := readPartitions(b)
		if err != nil {
			if !errors.Is(err, errStandbyUserData) {
				t.Fatalf("readPartitions(%x): untyped error %v", b, err)
			}
		} else {
			for _, p := range ps {
				if p < 0 {
					t.Fatalf("readPartitions(%x): negative partition %d", b, p)
				}
			}
			// Uvarints have more than one encoding only with padding,
			// which binary.Uvarint refuses past 10 bytes but accepts
			// below; compare values, not bytes.
			again, err := readPartitions(appendPartitions(nil, ps))
			if err != nil || !slices.Equal(again, ps) {
				t.Fatalf("round trip of %v: %v, %v", ps, again, err)
			}
		}
		n, warm := readJoinUserData(b)
		if n < 0 || n > 1<<16 {
			t.Fatalf("readJoinUserData(%x): standby count %d out of range", b, n)
		}
		if (len(b) == 0 || b[0] != standbyUserDataVersion) && (n != 0 || warm != nil) {
			t.Fatalf("readJoinUserData(%x) of an unknown version = %d, %v, want none", b, n, warm)
		}
	})
}
