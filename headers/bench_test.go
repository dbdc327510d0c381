package headers

import (
	"encoding/binary"
	"fmt"
	"testing"
)

var benchWidths = []int{1, 4, 16, 64, 200}

// benchClock builds a clock of width offset entries spread over topics of
// up to 8 partitions each, with topic IDs whose halves straddle the sign
// bit, so the causes dialect's reordering is exercised.
func benchClock(width int) *Clock {
	var c Clock
	for i := range width {
		var t TopicID
		binary.BigEndian.PutUint64(t[:8], uint64(i/8)*0x9e3779b97f4a7c15)
		binary.BigEndian.PutUint64(t[8:], uint64(i/8+1)*0xc2b2ae3d27d4eb4f)
		c.SetOffset(Channel{t, int32(i % 8)}, int64(1_000_000+i*37))
	}
	return &c
}

func BenchmarkDecode(b *testing.B) {
	for _, d := range []Dialect{DialectVC, DialectCauses} {
		for _, w := range benchWidths {
			c := benchClock(w)
			enc := mustEncode(b, c, d)
			b.Run(fmt.Sprintf("%s/width=%d/fresh", d, w), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(enc)))
				for b.Loop() {
					if _, err := decodeFresh(d, enc); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(fmt.Sprintf("%s/width=%d/reused", d, w), func(b *testing.B) {
				var into Clock
				b.ReportAllocs()
				b.SetBytes(int64(len(enc)))
				for b.Loop() {
					if err := decodeInto(d, &into, enc); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkDecodeMerge is the receive path: decode a record's stamp into a
// reused clock and fold it into a channel's running clock.
func BenchmarkDecodeMerge(b *testing.B) {
	for _, d := range []Dialect{DialectVC, DialectCauses} {
		for _, w := range benchWidths {
			c := benchClock(w)
			enc := mustEncode(b, c, d)
			b.Run(fmt.Sprintf("%s/width=%d", d, w), func(b *testing.B) {
				var into Clock
				acc := benchClock(w)
				b.ReportAllocs()
				for b.Loop() {
					if err := decodeInto(d, &into, enc); err != nil {
						b.Fatal(err)
					}
					acc.Merge(&into)
				}
			})
		}
	}
}

func BenchmarkMerge(b *testing.B) {
	for _, w := range benchWidths {
		src := benchClock(w)
		b.Run(fmt.Sprintf("width=%d", w), func(b *testing.B) {
			dst := benchClock(w)
			b.ReportAllocs()
			for b.Loop() {
				dst.Merge(src)
			}
		})
	}
}

func BenchmarkDominates(b *testing.B) {
	for _, w := range benchWidths {
		big, small := benchClock(w), benchClock(w)
		b.Run(fmt.Sprintf("width=%d", w), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if !big.Dominates(small) {
					b.Fatal("does not dominate")
				}
			}
		})
	}
}

func BenchmarkEncode(b *testing.B) {
	for _, d := range []Dialect{DialectVC, DialectCauses} {
		for _, w := range benchWidths {
			c := benchClock(w)
			b.Run(fmt.Sprintf("%s/width=%d/reused-buffer", d, w), func(b *testing.B) {
				buf := make([]byte, 0, 8192)
				b.ReportAllocs()
				var err error
				for b.Loop() {
					if d == DialectVC {
						buf, err = AppendVC(buf[:0], c)
					} else {
						buf, err = AppendCauses(buf[:0], c)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(buf)), "header-bytes")
			})
		}
	}
}

func BenchmarkReadStamp(b *testing.B) {
	for _, w := range benchWidths {
		var s Stamp
		s.Clock.CopyFrom(benchClock(w))
		s.Tagged, s.Sender, s.Seq = true, senderOne, 77
		hs, err := AppendStamp([]Header{{"trace", []byte("abc")}}, &s, DialectVC)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("vc/width=%d", w), func(b *testing.B) {
			var into Stamp
			b.ReportAllocs()
			for b.Loop() {
				if err := ReadStamp(&into, hs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func mustEncode(b *testing.B, c *Clock, d Dialect) []byte {
	var enc []byte
	var err error
	if d == DialectVC {
		enc, err = EncodeVC(c)
	} else {
		enc, err = EncodeCauses(c)
	}
	if err != nil {
		b.Fatal(err)
	}
	return enc
}

func decodeFresh(d Dialect, b []byte) (*Clock, error) {
	if d == DialectVC {
		return DecodeVC(b)
	}
	return DecodeCauses(b)
}

func decodeInto(d Dialect, c *Clock, b []byte) error {
	if d == DialectVC {
		return DecodeVCInto(c, b)
	}
	return DecodeCausesInto(c, b)
}

func TestHotPathsDoNotAllocate(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts")
	}
	c := benchClock(16)
	c.SetSeq(Channel{topicLow, 1}, senderOne, 1)
	ch := Channel{topicLow, 1}
	o := c.Clone()
	enc, _ := EncodeVC(c)
	var into Clock
	buf := make([]byte, 0, 4096)
	sub := new(Clock)
	sub.SetOffset(Channel{topicLow, 1}, 3)
	list := NewChannelList([]Channel{{topicLow, 1}, {topicLow, 2}})
	offs := make([]int64, 0, 2)
	for name, f := range map[string]func(){
		"Merge subset":     func() { c.Merge(sub) },
		"OffsetsOf":        func() { offs = c.OffsetsOf(&list, offs) },
		"SetSeq existing":  func() { c.SetSeq(ch, senderOne, 5) },
		"Seq":              func() { c.Seq(ch, senderOne) },
		"SetOffset":        func() { c.SetOffset(ch, 9) },
		"Offset":           func() { c.Offset(ch) },
		"Merge same shape": func() { c.Merge(o) },
		"Dominates":        func() { c.Dominates(o) },
		"DecodeVCInto":     func() { _ = DecodeVCInto(&into, enc) },
		"AppendVC":         func() { buf, _ = AppendVC(buf[:0], c) },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s: %v allocs per run, want 0", name, n)
		}
	}
}
