package headers

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

func seedHex(f *testing.F, s string) {
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
}

// dirty returns a clock holding entries, so decoding into it checks that
// reuse replaces rather than adds.
func dirty() *Clock {
	var c Clock
	c.SetOffset(Channel{topicPool[2], 1}, 7)
	c.SetSeq(Channel{topicPool[0], 0}, senderOne, 3)
	return &c
}

func FuzzDecodeVC(f *testing.F) {
	seedHex(f, goldenVC)
	seedHex(f, "01 00000000 00000000")
	seedHex(f, "01 ffffffff 00000000")
	f.Fuzz(func(t *testing.T, b []byte) {
		checkDecoder(t, b, DecodeVC, DecodeVCInto, EncodeVC)
	})
}

// checkDecoder holds a decoder to its contract on any input: it never
// panics, a fresh decode and a decode into a reused clock agree, a failed
// decode leaves the clock empty, and an accepted value re-encodes to exactly
// its bytes. It returns the decoded clock, or nil if b was refused.
func checkDecoder(t *testing.T, b []byte, decode func([]byte) (*Clock, error), decodeInto func(*Clock, []byte) error, encode func(*Clock) ([]byte, error)) *Clock {
	t.Helper()
	c, err := decode(b)
	reused := dirty()
	errInto := decodeInto(reused, b)
	if (err == nil) != (errInto == nil) {
		t.Fatalf("fresh and reused decodes disagree: %v / %v", err, errInto)
	}
	if err != nil {
		if !reused.IsEmpty() {
			t.Fatal("failed decode left entries behind")
		}
		return nil
	}
	if !reused.Equal(c) {
		t.Fatal("decoding into a reused clock differs from a fresh decode")
	}
	enc, err := encode(c)
	if err != nil {
		t.Fatalf("accepted value does not re-encode: %v", err)
	}
	if !bytes.Equal(enc, b) {
		t.Fatalf("accepted %x but re-encodes to %x", b, enc)
	}
	return c
}

func FuzzDecodeCauses(f *testing.F) {
	seedHex(f, goldenCauses)
	seedHex(f, "01 00")
	seedHex(f, "01 01 00112233445566778899aabbccddeeff 01 8580808010 0000000000000005")
	seedHex(f, "01 02 00112233445566778899aabbccddeeff 01 00 0000000000000001 80000000000000000000000000000001 01 00 0000000000000001")
	f.Fuzz(func(t *testing.T, b []byte) {
		c := checkDecoder(t, b, DecodeCauses, DecodeCausesInto, EncodeCauses)
		if c == nil {
			return
		}
		// Whatever the causes dialect accepts, the vc dialect can carry.
		vc, err := EncodeVC(c)
		if err != nil {
			t.Fatal(err)
		}
		back, err := DecodeVC(vc)
		if err != nil || !back.Equal(c) {
			t.Fatalf("causes clock does not survive the vc dialect: %v", err)
		}
	})
}

var fuzzKeys = []string{HeaderVC, HeaderVCSender, HeaderVCSeq, HeaderCauses, "app", "parsley.other"}

// headersFromBytes turns fuzz input into a header list: repeated
// (key index, value length, value) triples.
func headersFromBytes(b []byte) []Header {
	var hs []Header
	for len(b) >= 2 {
		k, n := int(b[0])%len(fuzzKeys), int(b[1])
		b = b[2:]
		if n > len(b) {
			n = len(b)
		}
		var v []byte
		if n > 0 || k%2 == 0 { // keep nil and empty values distinct
			v = b[:n:n]
		}
		hs = append(hs, Header{Key: fuzzKeys[k], Value: v})
		b = b[n:]
	}
	return hs
}

func FuzzReadStamp(f *testing.F) {
	vc, _ := hex.DecodeString(strings.Join(strings.Fields(goldenVC), ""))
	causes, _ := hex.DecodeString(strings.Join(strings.Fields(goldenCauses), ""))
	seed := []byte{0, byte(len(vc))}
	seed = append(seed, vc...)
	seed = append(seed, 3, byte(len(causes)))
	seed = append(seed, causes...)
	seed = append(seed, 1, 16)
	seed = append(seed, senderOne[:]...)
	seed = append(seed, 2, 8, 0, 0, 0, 0, 0, 0, 0, 9)
	f.Add(seed)
	f.Add([]byte{4, 1, 'x'})
	f.Fuzz(func(t *testing.T, b []byte) {
		hs := headersFromBytes(b)
		var s Stamp
		if err := ReadStamp(&s, hs); err != nil {
			if !s.Clock.IsEmpty() || s.Tagged {
				t.Fatal("failed read left a stamp behind")
			}
			return
		}
		// An accepted stamp is the union of its headers, each of which
		// decodes on its own and re-encodes to its exact bytes.
		var want Clock
		seen := map[string]int{}
		for _, h := range hs {
			seen[h.Key]++
			switch h.Key {
			case HeaderVC:
				c, err := DecodeVC(h.Value)
				if err != nil {
					t.Fatalf("stamp accepted an undecodable vc: %v", err)
				}
				if enc, _ := EncodeVC(c); !bytes.Equal(enc, h.Value) {
					t.Fatal("vc re-encodes differently")
				}
				want.Merge(c)
			case HeaderCauses:
				c, err := DecodeCauses(h.Value)
				if err != nil {
					t.Fatalf("stamp accepted undecodable causes: %v", err)
				}
				if enc, _ := EncodeCauses(c); !bytes.Equal(enc, h.Value) {
					t.Fatal("causes re-encodes differently")
				}
				want.Merge(c)
			}
		}
		for _, k := range []string{HeaderVC, HeaderVCSender, HeaderVCSeq, HeaderCauses} {
			if seen[k] > 1 {
				t.Fatalf("accepted duplicated %s", k)
			}
		}
		if (seen[HeaderVCSender] == 1) != s.Tagged || (seen[HeaderVCSeq] == 1) != s.Tagged {
			t.Fatal("tag presence does not match the headers")
		}
		if !s.Clock.Equal(&want) {
			t.Fatal("stamp clock is not the union of its dialects")
		}
		// Writing it back in the vc dialect and reading again is stable.
		out, err := AppendStamp([]Header(nil), &s, DialectVC)
		if err != nil {
			t.Fatal(err)
		}
		var again Stamp
		if err := ReadStamp(&again, out); err != nil || !again.Clock.Equal(&s.Clock) || again.Tagged != s.Tagged || again.Seq != s.Seq || again.Sender != s.Sender {
			t.Fatalf("vc round trip of an accepted stamp failed: %v", err)
		}
	})
}
