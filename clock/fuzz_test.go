package clock_test

import (
	"errors"
	"testing"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
)

// FuzzReadSender checks ReadSender against headers.ReadStamp on header
// lists made of tag headers only (no clock): both must agree on whether the
// tag is present, decodable, and what it says, and neither may panic.
func FuzzReadSender(f *testing.F) {
	id := make([]byte, 16)
	id[0] = 0xab
	f.Add(uint8(0b11), id, []byte{0, 0, 0, 0, 0, 0, 0, 42})
	f.Add(uint8(0b01), id, []byte{})
	f.Add(uint8(0b111), id, []byte{0xff, 0, 0, 0, 0, 0, 0, 0})
	f.Add(uint8(0), []byte{}, []byte{})
	f.Fuzz(func(t *testing.T, layout uint8, sender, seq []byte) {
		// layout bits: 0 sender present, 1 seq present, 2 sender twice,
		// 3 seq twice, 4 seq first.
		var hs []headers.Header
		add := func(key string, v []byte, present, twice bool) {
			if present {
				hs = append(hs, headers.Header{Key: key, Value: v})
				if twice {
					hs = append(hs, headers.Header{Key: key, Value: v})
				}
			}
		}
		addSender := func() { add(headers.HeaderVCSender, sender, layout&1 != 0, layout&4 != 0) }
		addSeq := func() { add(headers.HeaderVCSeq, seq, layout&2 != 0, layout&8 != 0) }
		hs = append(hs, headers.Header{Key: "app", Value: seq})
		if layout&16 != 0 {
			addSeq()
			addSender()
		} else {
			addSender()
			addSeq()
		}
		gotID, gotSeq, ok, err := clock.ReadSender(hs)
		var s headers.Stamp
		want := headers.ReadStamp(&s, hs)
		if (err == nil) != (want == nil) {
			t.Fatalf("ReadSender err = %v, ReadStamp err = %v", err, want)
		}
		if err != nil {
			if !errors.Is(err, headers.ErrUndecodable) {
				t.Fatalf("error %v does not wrap ErrUndecodable", err)
			}
			if ok {
				t.Fatal("ok alongside an error")
			}
			return
		}
		if ok != s.Tagged || (ok && (gotID != s.Sender || gotSeq != s.Seq)) {
			t.Fatalf("ReadSender = %v %d %v; ReadStamp = %v %d %v", gotID, gotSeq, ok, s.Sender, s.Seq, s.Tagged)
		}
	})
}
