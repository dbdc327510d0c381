package headers

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
)

// The golden vectors below are written by hand from the reference pages
// (wire format 0.2 for vc, causes v1 for parsley.causes), not produced by
// our encoder. Spaces and newlines only group the bytes for reading.

func unhexT(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.Join(strings.Fields(s), ""))
	if err != nil {
		t.Fatalf("bad test hex: %v", err)
	}
	return b
}

func mustTopic(s string) TopicID {
	id, err := ParseTopicID(s)
	if err != nil {
		panic(err)
	}
	return id
}

var (
	topicLow  = mustTopic("00112233-4455-6677-8899-aabbccddeeff")
	topicHigh = mustTopic("80000000-0000-0000-0000-000000000001") // negative most significant half in Java
	senderOne = SenderID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
)

// goldenVC has two offset entries and one sequence entry. Java sorts UUIDs
// as signed longs, so the topic whose first byte is 0x80 comes first.
const goldenVC = `
01
00000002
  80000000000000000000000000000001 00000000 0000000000000009
  00112233445566778899aabbccddeeff 00000000 0000000000000005
00000001
  00112233445566778899aabbccddeeff 00000003 0102030405060708090a0b0c0d0e0f10 0000000000000007
`

// goldenCauses has two topics and three partitions. Groups ascend in
// unsigned byte order, so topicLow comes first; partition 129 is the
// two-byte varint 81 01.
const goldenCauses = `
01 02
  00112233445566778899aabbccddeeff 02
    00 0000000000000005
    07 0000000000000010
  80000000000000000000000000000001 01
    8101 000000000000002a
`

func TestGoldenVC(t *testing.T) {
	b := unhexT(t, goldenVC)
	c, err := DecodeVC(b)
	if err != nil {
		t.Fatal(err)
	}
	want := []OffsetEntry{
		{Channel{topicHigh, 0}, 9},
		{Channel{topicLow, 0}, 5},
	}
	if got := c.AppendOffsetEntries(nil); !equalSlices(got, want) {
		t.Errorf("offset entries = %v, want %v", got, want)
	}
	wantSeq := []SeqEntry{{Channel{topicLow, 3}, senderOne, 7}}
	if got := c.AppendSeqEntries(nil); !equalSlices(got, wantSeq) {
		t.Errorf("sequence entries = %v, want %v", got, wantSeq)
	}
	re, err := EncodeVC(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(re, b) {
		t.Errorf("re-encoded\n%x\nwant\n%x", re, b)
	}
	// Building the same clock in another insertion order gives the same bytes.
	var d Clock
	d.SetSeq(Channel{topicLow, 3}, senderOne, 7)
	d.SetOffset(Channel{topicLow, 0}, 5)
	d.SetOffset(Channel{topicHigh, 0}, 9)
	if enc, _ := EncodeVC(&d); !bytes.Equal(enc, b) {
		t.Errorf("clock built by hand encodes to\n%x\nwant\n%x", enc, b)
	}
}

func TestGoldenCauses(t *testing.T) {
	b := unhexT(t, goldenCauses)
	c, err := DecodeCauses(b)
	if err != nil {
		t.Fatal(err)
	}
	want := map[Channel]int64{
		{topicLow, 0}:    5,
		{topicLow, 7}:    16,
		{topicHigh, 129}: 42,
	}
	if c.NumOffsets() != len(want) || c.NumSeqs() != 0 {
		t.Fatalf("decoded %d offset and %d sequence entries, want %d and 0", c.NumOffsets(), c.NumSeqs(), len(want))
	}
	for ch, off := range want {
		if got, ok := c.Offset(ch); !ok || got != off {
			t.Errorf("Offset(%v) = %d, %v; want %d", ch, got, ok, off)
		}
	}
	re, err := EncodeCauses(c)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(re, b) {
		t.Errorf("re-encoded\n%x\nwant\n%x", re, b)
	}
	// The documented size: 2-byte preamble, 26 bytes for a topic's first
	// partition and 9 for each further one (partitions below 128; 129 costs
	// one more byte).
	if got, want := len(b), 2+26+9+26+1; got != want {
		t.Errorf("golden value is %d bytes, want %d", got, want)
	}
	if got := CausesSize(c); got != len(b) {
		t.Errorf("CausesSize = %d, want %d", got, len(b))
	}
}

func TestGoldenEmptyCauses(t *testing.T) {
	c, err := DecodeCauses([]byte{0x01, 0x00})
	if err != nil {
		t.Fatal(err)
	}
	if !c.IsEmpty() {
		t.Errorf("decoded %v, want empty", c.AppendOffsetEntries(nil))
	}
	re, err := EncodeCauses(&Clock{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(re, []byte{0x01, 0x00}) {
		t.Errorf("empty clock encodes to %x, want 0100", re)
	}
}

func TestGoldenSenderAndSeq(t *testing.T) {
	id, err := DecodeSender(unhexT(t, "0102030405060708090a0b0c0d0e0f10"))
	if err != nil || id != senderOne {
		t.Fatalf("DecodeSender = %v, %v", id, err)
	}
	if got := id.String(); got != "01020304-0506-0708-090a-0b0c0d0e0f10" {
		t.Errorf("String = %s", got)
	}
	seq, err := DecodeSeq(unhexT(t, "0000000000000102"))
	if err != nil || seq != 258 {
		t.Fatalf("DecodeSeq = %d, %v; want 258", seq, err)
	}
}

// TestCausesMalformed is the malformation catalogue of the causes dialect:
// every entry must be refused with ErrUndecodable.
func TestCausesMalformed(t *testing.T) {
	const topicA = "00112233445566778899aabbccddeeff"
	const topicB = "80000000000000000000000000000001"
	const pos5 = "0000000000000005"
	cases := []struct{ name, hex string }{
		{"nil value", ""},
		{"unknown version 0", "00 00"},
		{"unknown version 2", "02 00"},
		{"version only", "01"},
		{"trailing bytes after empty", "01 00 00"},
		{"trailing bytes after group", "01 01" + topicA + "01 00" + pos5 + "ff"},
		{"topic count exceeds groups", "01 02" + topicA + "01 00" + pos5},
		{"topic count below groups", "01 01" + topicA + "01 00" + pos5 + topicB + "01 00" + pos5},
		{"partition count exceeds pairs", "01 01" + topicA + "02 00" + pos5},
		{"partition count below pairs", "01 01" + topicA + "01 00" + pos5 + "01" + pos5},
		{"partition count zero", "01 01" + topicA + "00"},
		{"non-minimal topic count", "01 8000"},
		{"non-minimal partition count", "01 01" + topicA + "8100 00" + pos5},
		{"non-minimal partition", "01 01" + topicA + "01 8000" + pos5},
		{"six-byte varint", "01 808080808000"},
		{"fifth byte with continuation", "01 01" + topicA + "01 8080808088" + pos5},
		{"fifth byte beyond low three bits", "01 01" + topicA + "01 8580808010" + pos5},
		{"partition 2^31 (fifth byte 08)", "01 01" + topicA + "01 8080808008" + pos5},
		{"equal topic IDs", "01 02" + topicA + "01 00" + pos5 + topicA + "01 01" + pos5},
		{"descending topic IDs", "01 02" + topicB + "01 00" + pos5 + topicA + "01 00" + pos5},
		{"equal partitions", "01 01" + topicA + "02 03" + pos5 + "03" + pos5},
		{"descending partitions", "01 01" + topicA + "02 04" + pos5 + "03" + pos5},
		{"zero topic ID", "01 01 00000000000000000000000000000000 01 00" + pos5},
		{"negative position", "01 01" + topicA + "01 00 ffffffffffffffff"},
		{"most negative position", "01 01" + topicA + "01 00 8000000000000000"},
		{"position 2^63-1", "01 01" + topicA + "01 00 7fffffffffffffff"},
		{"huge topic count", "01 ffffffff07"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := unhexT(t, tc.hex)
			c, err := DecodeCauses(b)
			if !errors.Is(err, ErrUndecodable) {
				t.Fatalf("DecodeCauses(%x) = %v, %v; want ErrUndecodable", b, c, err)
			}
			var de *DecodeError
			if !errors.As(err, &de) || de.Header != HeaderCauses || de.Offset < 0 || de.Offset > len(b) {
				t.Errorf("error %v: want a *DecodeError for %s with an offset inside the value", err, HeaderCauses)
			}
		})
	}
	t.Run("empty non-nil value", func(t *testing.T) {
		if _, err := DecodeCauses([]byte{}); !errors.Is(err, ErrUndecodable) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("position 2^63-2 is accepted", func(t *testing.T) {
		if _, err := DecodeCauses(unhexT(t, "01 01"+topicA+"01 00 7ffffffffffffffe")); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("five-byte varint 2^31-1 is accepted", func(t *testing.T) {
		c, err := DecodeCauses(unhexT(t, "01 01"+topicA+"01 ffffffff07"+pos5))
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := c.Offset(Channel{mustTopic("00112233-4455-6677-8899-aabbccddeeff"), 1<<31 - 1}); !ok || got != 5 {
			t.Fatalf("partition 2^31-1 not decoded: %v %v", got, ok)
		}
	})
}

func TestCausesEveryStrictPrefixRejected(t *testing.T) {
	b := unhexT(t, goldenCauses)
	for n := 0; n < len(b); n++ {
		if _, err := DecodeCauses(b[:n]); !errors.Is(err, ErrUndecodable) {
			t.Errorf("prefix of %d bytes: err = %v, want ErrUndecodable", n, err)
		}
	}
}

func TestVCMalformed(t *testing.T) {
	const topicA = "00112233445566778899aabbccddeeff"
	const topicB = "80000000000000000000000000000001"
	const off5 = "0000000000000005"
	const seq7 = "0000000000000007"
	const sender = "0102030405060708090a0b0c0d0e0f10"
	cases := []struct{ name, hex string }{
		{"nil value", ""},
		{"unknown version", "02 00000000 00000000"},
		{"version zero", "00 00000000 00000000"},
		{"truncated offset count", "01 0000"},
		{"missing sequence count", "01 00000000"},
		{"negative offset count", "01 ffffffff 00000000"},
		{"negative sequence count", "01 00000000 ffffffff"},
		{"offset count exceeds length", "01 00000002" + topicA + "00000000" + off5 + "00000000"},
		{"offset count below length", "01 00000000" + topicA + "00000000" + off5 + "00000000"},
		{"sequence count exceeds length", "01 00000000 00000001"},
		{"trailing bytes", "01 00000000 00000000 00"},
		{"sequence entry truncated", "01 00000000 00000001" + topicA + "00000000" + sender},
		{"unsorted offset entries (unsigned order instead of Java's)", "01 00000002" + topicA + "00000000" + off5 + topicB + "00000000" + off5 + "00000000"},
		{"unsorted partitions", "01 00000002" + topicA + "00000002" + off5 + topicA + "00000001" + off5 + "00000000"},
		{"duplicate offset entries", "01 00000002" + topicA + "00000001" + off5 + topicA + "00000001" + off5 + "00000000"},
		{"duplicate sequence entries", "01 00000000 00000002" + topicA + "00000000" + sender + seq7 + topicA + "00000000" + sender + seq7},
		// Java compares sender halves as signed longs: 0xff.. is negative and sorts before 0x7f...
		{"unsorted senders", "01 00000000 00000002" + topicA + "00000000" + "7f" + sender[2:] + seq7 + topicA + "00000000" + "ff" + sender[2:] + seq7},
		{"negative partition", "01 00000001" + topicA + "ffffffff" + off5 + "00000000"},
		{"negative offset", "01 00000001" + topicA + "00000000 ffffffffffffffff 00000000"},
		{"negative sequence partition", "01 00000000 00000001" + topicA + "80000000" + sender + seq7},
		{"negative sequence", "01 00000000 00000001" + topicA + "00000000" + sender + "8000000000000000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := unhexT(t, tc.hex)
			if _, err := DecodeVC(b); !errors.Is(err, ErrUndecodable) {
				t.Fatalf("DecodeVC(%x) err = %v, want ErrUndecodable", b, err)
			}
			var de *DecodeError
			if err := DecodeVCInto(&Clock{}, b); !errors.As(err, &de) || de.Header != HeaderVC {
				t.Errorf("want *DecodeError for vc, got %v", err)
			}
		})
	}
	b := unhexT(t, goldenVC)
	for n := 0; n < len(b); n++ {
		if _, err := DecodeVC(b[:n]); !errors.Is(err, ErrUndecodable) {
			t.Errorf("prefix of %d bytes: err = %v, want ErrUndecodable", n, err)
		}
	}
}

func TestSenderAndSeqMalformed(t *testing.T) {
	for _, b := range [][]byte{nil, {}, make([]byte, 15), make([]byte, 17)} {
		if _, err := DecodeSender(b); !errors.Is(err, ErrUndecodable) {
			t.Errorf("DecodeSender(%d bytes) err = %v", len(b), err)
		}
	}
	for _, b := range [][]byte{nil, {}, make([]byte, 7), make([]byte, 9), {0x80, 0, 0, 0, 0, 0, 0, 0}} {
		if _, err := DecodeSeq(b); !errors.Is(err, ErrUndecodable) {
			t.Errorf("DecodeSeq(%x) err = %v", b, err)
		}
	}
}

func TestDecodeIntoLeavesClockEmptyOnError(t *testing.T) {
	var c Clock
	c.SetOffset(Channel{topicLow, 1}, 3)
	if err := DecodeCausesInto(&c, unhexT(t, "01 01 00112233445566778899aabbccddeeff 02 00 0000000000000005")); err == nil {
		t.Fatal("truncated value accepted")
	}
	if !c.IsEmpty() {
		t.Errorf("clock after failed decode = %v, want empty", c.AppendOffsetEntries(nil))
	}
	c.SetOffset(Channel{topicLow, 1}, 3)
	if err := DecodeVCInto(&c, []byte{1, 0, 0, 0, 1}); err == nil {
		t.Fatal("truncated vc accepted")
	}
	if !c.IsEmpty() {
		t.Errorf("clock after failed vc decode is not empty")
	}
}

func TestEncodeRefusesWhatTheDialectCannotSay(t *testing.T) {
	cases := []struct {
		name  string
		build func(*Clock)
		vcOK  bool
	}{
		{"sequence entry", func(c *Clock) { c.SetSeq(Channel{topicLow, 0}, senderOne, 1) }, true},
		{"zero topic", func(c *Clock) { c.SetOffset(Channel{TopicID{}, 0}, 1) }, true},
		{"negative partition", func(c *Clock) { c.SetOffset(Channel{topicLow, -1}, 1) }, false},
		{"negative offset", func(c *Clock) { c.SetOffset(Channel{topicLow, 0}, -1) }, false},
		{"position 2^63-1", func(c *Clock) { c.SetOffset(Channel{topicLow, 0}, 1<<63-1) }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var c Clock
			tc.build(&c)
			if _, err := EncodeCauses(&c); !errors.Is(err, ErrUnencodable) {
				t.Errorf("EncodeCauses err = %v, want ErrUnencodable", err)
			}
			dst := []byte("keep")
			if out, err := AppendCauses(dst, &c); err == nil || string(out) != "keep" {
				t.Errorf("AppendCauses = %q, %v; want dst unchanged and an error", out, err)
			}
			_, err := EncodeVC(&c)
			if tc.vcOK != (err == nil) {
				t.Errorf("EncodeVC err = %v, want ok=%v", err, tc.vcOK)
			}
			if err != nil && !errors.Is(err, ErrUnencodable) {
				t.Errorf("EncodeVC err = %v does not wrap ErrUnencodable", err)
			}
		})
	}
}

func equalSlices[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
