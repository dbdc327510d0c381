package observer

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/parsley-go/parsley/headers"
)

// randomStamp returns a stamp over a few topics whose IDs cover both
// halves of the signed order.
func randomStamp(r *rand.Rand) headers.Stamp {
	var st headers.Stamp
	topics := make([]headers.TopicID, 1+r.IntN(4))
	for i := range topics {
		for j := range topics[i] {
			topics[i][j] = byte(r.IntN(256))
		}
	}
	senders := []headers.SenderID{{0x80, 1}, {0x7f, 2}, {0x01}}
	for range r.IntN(20) {
		ch := headers.Channel{Topic: topics[r.IntN(len(topics))], Partition: int32(r.IntN(40))}
		st.Clock.SetOffset(ch, r.Int64N(1<<40))
	}
	for range r.IntN(6) {
		ch := headers.Channel{Topic: topics[r.IntN(len(topics))], Partition: int32(r.IntN(40))}
		st.Clock.SetSeq(ch, senders[r.IntN(len(senders))], r.Int64N(1<<33))
	}
	if r.IntN(2) == 0 {
		st.Tagged, st.Sender, st.Seq = true, senders[r.IntN(len(senders))], r.Int64N(1<<50)
	}
	return st
}

func compactOf(b *compactBuf, st *headers.Stamp, flags byte) ([]byte, bool) {
	return b.appendCompactStamp(nil, st, st.Clock.AppendOffsetEntries(nil), st.Clock.AppendSeqEntries(nil), flags)
}

func TestCompactStampRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var b compactBuf
	for range 2000 {
		st := randomStamp(r)
		enc, ok := compactOf(&b, &st, compactVC)
		if !ok {
			t.Fatalf("stamp %+v not encodable", st)
		}
		var got headers.Stamp
		if _, err := readCompactStamp(&got, enc); err != nil {
			t.Fatalf("decode: %v", err)
		}
		if !got.Clock.Equal(&st.Clock) || got.Tagged != st.Tagged || (st.Tagged && (got.Sender != st.Sender || got.Seq != st.Seq)) {
			t.Fatalf("round trip changed the stamp:\n%+v\n%+v", st, got)
		}
		// Every shorter prefix is corrupt, never a panic or a smaller stamp.
		for n := range len(enc) {
			if _, err := readCompactStamp(&got, enc[:n]); err == nil {
				t.Fatalf("a %d-byte prefix of a %d-byte stamp decoded", n, len(enc))
			}
		}
	}
}

// TestStoredHeadersKeepTheDialect re-encodes stored stamps in the dialects
// the records carried, and they decode to the stamps stored.
func TestStoredHeadersKeepTheDialect(t *testing.T) {
	ch := headers.Channel{Topic: headers.TopicID{9}, Partition: 2}
	var causes headers.Stamp
	causes.Clock.SetOffset(ch, 7)
	tagged := headers.Stamp{Tagged: true, Sender: headers.SenderID{3}, Seq: 4}
	tagged.Clock.SetOffset(ch, 8)
	tagged.Clock.SetSeq(ch, headers.SenderID{5}, 6)
	for _, c := range []struct {
		name  string
		st    headers.Stamp
		flags byte
		keys  []string
	}{
		{"causes", causes, compactCauses, []string{headers.HeaderCauses}},
		{"vc", causes, compactVC, []string{headers.HeaderVC}},
		{"tagged vc", tagged, compactVC, []string{headers.HeaderVC, headers.HeaderVCSender, headers.HeaderVCSeq}},
		{"both", causes, compactVC | compactCauses, []string{headers.HeaderVC, headers.HeaderCauses}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b compactBuf
			enc, ok := compactOf(&b, &c.st, c.flags)
			if !ok {
				t.Fatal("not encodable")
			}
			hs, st, err := storedHeaders(enc)
			if err != nil {
				t.Fatal(err)
			}
			var keys []string
			for _, h := range hs {
				keys = append(keys, h.Key)
			}
			if !slices.Equal(keys, c.keys) {
				t.Errorf("headers %v, want %v", keys, c.keys)
			}
			var again headers.Stamp
			if err := headers.ReadStamp(&again, hs); err != nil {
				t.Fatal(err)
			}
			if !again.Clock.Equal(&c.st.Clock) || !st.Clock.Equal(&c.st.Clock) || again.Tagged != c.st.Tagged {
				t.Errorf("re-encoded headers read as %+v, want %+v", again, c.st)
			}
		})
	}
}

// TestChanOrderIsClockOrder holds chanOrder and seqOrder, which the claim
// index uses to walk two clocks' entries side by side, to the order a
// clock keeps them in.
func TestChanOrderIsClockOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		st := randomStamp(r)
		offs := st.Clock.AppendOffsetEntries(nil)
		if !slices.IsSortedFunc(offs, func(a, b headers.OffsetEntry) int { return chanOrder(a.Channel, b.Channel) }) {
			t.Fatalf("clock order %v is not chanOrder", offs)
		}
		seqs := st.Clock.AppendSeqEntries(nil)
		if !slices.IsSortedFunc(seqs, seqOrder) {
			t.Fatalf("clock order %v is not seqOrder", seqs)
		}
	}
}

// FuzzStoredStamp feeds arbitrary bytes to the store's stamp decoders:
// they return an error or a stamp, never panic, and what the compact
// decoder accepts encodes back to the same bytes.
func FuzzStoredStamp(f *testing.F) {
	r := rand.New(rand.NewPCG(5, 6))
	var b compactBuf
	for range 8 {
		st := randomStamp(r)
		enc, _ := compactOf(&b, &st, compactVC)
		f.Add(enc)
	}
	f.Add([]byte{0, 1, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 1, 0, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		var st headers.Stamp
		_ = readStoredStamp(&st, in)
		_, _, _ = storedHeaders(in)
		flags, err := readCompactStamp(&st, in)
		if err != nil {
			return
		}
		enc, ok := compactOf(&b, &st, flags&^compactTagged)
		if !ok {
			t.Fatalf("decoded stamp %+v does not encode", st)
		}
		var again headers.Stamp
		if _, err := readCompactStamp(&again, enc); err != nil || !again.Clock.Equal(&st.Clock) {
			t.Fatalf("re-encoding %x gives %x, which reads as %+v (%v)", in, enc, again, err)
		}
	})
}
