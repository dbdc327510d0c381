package headers

import (
	"bytes"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// topicPool mixes IDs whose halves straddle the sign bit, and two IDs that
// share their most significant half, so the signed (Java) order and the
// unsigned byte order disagree in every way they can.
var topicPool = []TopicID{
	mustTopic("00112233-4455-6677-8899-aabbccddeeff"),
	mustTopic("80000000-0000-0000-0000-000000000001"),
	mustTopic("7fffffff-ffff-ffff-ffff-ffffffffffff"),
	mustTopic("ffffffff-ffff-ffff-0000-000000000000"),
	mustTopic("12345678-9abc-def0-0000-000000000001"),
	mustTopic("12345678-9abc-def0-8000-000000000001"),
	mustTopic("c0ffee00-0000-4000-8000-00000000beef"),
}

var senderPool = []SenderID{
	{1},
	{0x80, 1},
	{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
	{0, 0, 0, 0, 0, 0, 0, 0, 0x80},
}

type seqKey struct {
	ch Channel
	s  SenderID
}

// model is the obviously correct reference a Clock is checked against.
type model struct {
	off map[Channel]int64
	seq map[seqKey]int64
}

func newModel() *model { return &model{off: map[Channel]int64{}, seq: map[seqKey]int64{}} }

func (m *model) dominates(o *model) bool {
	for ch, v := range o.off {
		if w, ok := m.off[ch]; !ok || w < v {
			return false
		}
	}
	for k, v := range o.seq {
		if w, ok := m.seq[k]; !ok || w < v {
			return false
		}
	}
	return true
}

func randClock(r *rand.Rand, maxEntries int, withSeqs bool) (*Clock, *model) {
	c, m := new(Clock), newModel()
	n := r.IntN(maxEntries + 1)
	for range n {
		ch := Channel{topicPool[r.IntN(len(topicPool))], int32(r.IntN(4))}
		if r.IntN(10) == 0 {
			ch.Partition = int32(r.IntN(1 << 20))
		}
		v := r.Int64N(1000)
		if withSeqs && r.IntN(3) == 0 {
			s := senderPool[r.IntN(len(senderPool))]
			c.SetSeq(ch, s, v)
			k := seqKey{ch, s}
			if old, ok := m.seq[k]; !ok || v > old {
				m.seq[k] = v
			}
			continue
		}
		c.SetOffset(ch, v)
		if old, ok := m.off[ch]; !ok || v > old {
			m.off[ch] = v
		}
	}
	return c, m
}

func checkAgainstModel(t *testing.T, c *Clock, m *model) {
	t.Helper()
	got := map[Channel]int64{}
	for e := range c.OffsetEntries() {
		got[e.Channel] = e.Offset
	}
	if !maps.Equal(got, m.off) {
		t.Fatalf("offset entries %v, model %v", got, m.off)
	}
	gotSeq := map[seqKey]int64{}
	for e := range c.SeqEntries() {
		gotSeq[seqKey{e.Channel, e.Sender}] = e.Seq
	}
	if !maps.Equal(gotSeq, m.seq) {
		t.Fatalf("sequence entries %v, model %v", gotSeq, m.seq)
	}
	if offs := c.AppendOffsetEntries(nil); !slices.IsSortedFunc(offs, func(a, b OffsetEntry) int { return a.Channel.Compare(b.Channel) }) {
		t.Fatalf("offset entries not sorted: %v", offs)
	}
	seqs := c.AppendSeqEntries(nil)
	if !slices.IsSortedFunc(seqs, func(a, b SeqEntry) int {
		if r := a.Channel.Compare(b.Channel); r != 0 {
			return r
		}
		return a.Sender.Compare(b.Sender)
	}) {
		t.Fatalf("sequence entries not sorted: %v", seqs)
	}
}

func TestClockMatchesModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		a, ma := randClock(r, 12, true)
		checkAgainstModel(t, a, ma)
		b, mb := randClock(r, 12, true)
		if got, want := a.Dominates(b), ma.dominates(mb); got != want {
			t.Fatalf("Dominates = %v, model says %v\na=%v %v\nb=%v %v", got, want, a.AppendOffsetEntries(nil), a.AppendSeqEntries(nil), b.AppendOffsetEntries(nil), b.AppendSeqEntries(nil))
		}
		// Merge against the model: pointwise max.
		m := a.Clone()
		m.Merge(b)
		mm := newModel()
		for _, src := range []*model{ma, mb} {
			for ch, v := range src.off {
				if w, ok := mm.off[ch]; !ok || v > w {
					mm.off[ch] = v
				}
			}
			for k, v := range src.seq {
				if w, ok := mm.seq[k]; !ok || v > w {
					mm.seq[k] = v
				}
			}
		}
		checkAgainstModel(t, m, mm)
		// Delete and retain agree with the model.
		for ch := range ma.off {
			a.DeleteOffset(ch)
			delete(ma.off, ch)
			break
		}
		a.RetainSeqs(func(e SeqEntry) bool { return e.Seq%2 == 0 })
		maps.DeleteFunc(ma.seq, func(_ seqKey, v int64) bool { return v%2 != 0 })
		checkAgainstModel(t, a, ma)
	}
}

func TestMergeLaws(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	merge := func(x, y *Clock) *Clock { z := x.Clone(); z.Merge(y); return z }
	for range 2000 {
		a, _ := randClock(r, 10, true)
		b, _ := randClock(r, 10, true)
		c, _ := randClock(r, 10, true)
		if !merge(a, b).Equal(merge(b, a)) {
			t.Fatalf("merge not commutative")
		}
		if !merge(merge(a, b), c).Equal(merge(a, merge(b, c))) {
			t.Fatalf("merge not associative")
		}
		if !merge(a, a).Equal(a) {
			t.Fatalf("merge not idempotent")
		}
		ab := merge(a, b)
		if !ab.Dominates(a) || !ab.Dominates(b) {
			t.Fatalf("merge does not dominate its arguments")
		}
	}
}

func TestDominanceIsAPartialOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var empty Clock
	for range 3000 {
		a, _ := randClock(r, 6, true)
		b, _ := randClock(r, 6, true)
		c, _ := randClock(r, 6, true)
		if !a.Dominates(a) {
			t.Fatal("not reflexive")
		}
		if !a.Dominates(&empty) {
			t.Fatal("does not dominate the empty clock")
		}
		if a.Dominates(b) && b.Dominates(a) && !a.Equal(b) {
			t.Fatalf("not antisymmetric: %v / %v", a.AppendOffsetEntries(nil), b.AppendOffsetEntries(nil))
		}
		// Transitivity, made non-vacuous by building chains.
		ab := a.Clone()
		ab.Merge(b)
		abc := ab.Clone()
		abc.Merge(c)
		if !abc.Dominates(ab) || !ab.Dominates(a) || !abc.Dominates(a) {
			t.Fatal("not transitive along a chain")
		}
		if a.Dominates(b) && b.Dominates(c) && !a.Dominates(c) {
			t.Fatal("not transitive")
		}
	}
}

func TestRoundTripRandomClocks(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var reuse Clock
	var buf []byte
	for range 3000 {
		c, _ := randClock(r, 30, true)
		enc, err := EncodeVC(c)
		if err != nil {
			t.Fatal(err)
		}
		if err := DecodeVCInto(&reuse, enc); err != nil {
			t.Fatalf("decode of our own vc encoding failed: %v", err)
		}
		if !reuse.Equal(c) {
			t.Fatalf("vc round trip changed the clock")
		}
		buf, _ = AppendVC(buf[:0], &reuse)
		if !bytes.Equal(buf, enc) {
			t.Fatal("vc re-encoding differs")
		}

		o, _ := randClock(r, 30, false)
		enc, err = EncodeCauses(o)
		if err != nil {
			t.Fatal(err)
		}
		if len(enc) != CausesSize(o) {
			t.Fatalf("CausesSize = %d, encoded %d", CausesSize(o), len(enc))
		}
		if err := DecodeCausesInto(&reuse, enc); err != nil {
			t.Fatalf("decode of our own causes encoding failed: %v\n%x", err, enc)
		}
		if !reuse.Equal(o) {
			t.Fatalf("causes round trip changed the clock:\n%v\n%v", reuse.AppendOffsetEntries(nil), o.AppendOffsetEntries(nil))
		}
		buf, _ = AppendCauses(buf[:0], &reuse)
		if !bytes.Equal(buf, enc) {
			t.Fatal("causes re-encoding differs")
		}
	}
}

func TestZeroClockIsEmptyAndUsable(t *testing.T) {
	var c Clock
	if !c.IsEmpty() || c.NumOffsets() != 0 || c.NumSeqs() != 0 {
		t.Fatal("zero Clock is not empty")
	}
	if _, ok := c.Offset(Channel{topicLow, 0}); ok {
		t.Fatal("zero Clock has an entry")
	}
	enc, err := EncodeVC(&c)
	if err != nil || !bytes.Equal(enc, []byte{1, 0, 0, 0, 0, 0, 0, 0, 0}) {
		t.Fatalf("EncodeVC(empty) = %x, %v", enc, err)
	}
}

func TestSetOffsetOnlyRaises(t *testing.T) {
	var c Clock
	ch := Channel{topicLow, 2}
	c.SetOffset(ch, 10)
	c.SetOffset(ch, 4)
	if v, _ := c.Offset(ch); v != 10 {
		t.Fatalf("watermark lowered to %d", v)
	}
	c.SetSeq(ch, senderOne, 3)
	c.SetSeq(ch, senderOne, 1)
	if v, _ := c.Seq(ch, senderOne); v != 3 {
		t.Fatalf("sequence watermark lowered to %d", v)
	}
	c.DeleteSeq(ch, senderOne)
	if _, ok := c.Seq(ch, senderOne); ok {
		t.Fatal("DeleteSeq left the entry")
	}
}

func TestCloneAndCopyFromAreIndependent(t *testing.T) {
	var a Clock
	a.SetOffset(Channel{topicLow, 0}, 1)
	b := a.Clone()
	b.SetOffset(Channel{topicLow, 0}, 9)
	var c Clock
	c.CopyFrom(&a)
	c.SetOffset(Channel{topicHigh, 0}, 2)
	if v, _ := a.Offset(Channel{topicLow, 0}); v != 1 || a.NumOffsets() != 1 {
		t.Fatal("mutating a copy changed the original")
	}
}

func TestTopicIDText(t *testing.T) {
	id := mustTopic("0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0")
	if got := id.String(); got != "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0" {
		t.Errorf("String = %s", got)
	}
	if id[0] != 0x0f || id[15] != 0xf0 {
		t.Errorf("bytes %x", id)
	}
	for _, bad := range []string{"", "0f1e2d3c4b5a69788796a5b4c3d2e1f0", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1fg", "0f1e2d3c-4b5a-6978-8796_a5b4c3d2e1f0", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f00"} {
		if _, err := ParseTopicID(bad); err == nil {
			t.Errorf("ParseTopicID(%q) accepted", bad)
		}
		if _, err := ParseSenderID(bad); err == nil {
			t.Errorf("ParseSenderID(%q) accepted", bad)
		}
	}
	ch := Channel{id, 3}
	if got := (Coordinate{ch, 42}).String(); got != "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0/3@42" {
		t.Errorf("Coordinate.String = %s", got)
	}
}

// TestTopicOrderMatchesJava pins the order the vc dialect is sorted by to
// java.util.UUID.compareTo: signed halves.
func TestTopicOrderMatchesJava(t *testing.T) {
	ordered := []string{ // ascending in Java's order
		"80000000-0000-0000-0000-000000000000",
		"ffffffff-ffff-ffff-ffff-ffffffffffff",
		"00000000-0000-0000-8000-000000000000",
		"00000000-0000-0000-ffff-ffffffffffff",
		"00000000-0000-0000-0000-000000000001",
		"7fffffff-ffff-ffff-7fff-ffffffffffff",
	}
	for i := 1; i < len(ordered); i++ {
		a, b := mustTopic(ordered[i-1]), mustTopic(ordered[i])
		if a.Compare(b) >= 0 || b.Compare(a) <= 0 {
			t.Errorf("%s should sort before %s", a, b)
		}
	}
	if topicLow.CompareBytes(topicHigh) >= 0 {
		t.Error("CompareBytes is not unsigned byte order")
	}
}
