package headers

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestOffsetsOfMatchesModel: OffsetsOf reports, for every channel of a
// list, what the model holds, for clocks narrower and much wider than the
// list (the walk and the search).
func TestOffsetsOfMatchesModel(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	var out []int64
	for range 2000 {
		c, m := randClock(r, 40, true)
		var chs []Channel
		for range r.IntN(6) {
			chs = append(chs, Channel{topicPool[r.IntN(len(topicPool))], int32(r.IntN(4))})
		}
		chs = uniqueChannels(chs)
		l := NewChannelList(chs)
		out = c.OffsetsOf(&l, out)
		if len(out) != len(chs) {
			t.Fatalf("OffsetsOf returned %d values for %d channels", len(out), len(chs))
		}
		slices.SortFunc(chs, Channel.Compare)
		for i, ch := range chs {
			want, ok := m.off[ch]
			if !ok {
				want = NoOffset
			}
			if out[i] != want {
				t.Fatalf("OffsetsOf[%d] (%s) = %d, model %d (clock %v)", i, ch, out[i], want, c.AppendOffsetEntries(nil))
			}
		}
	}
}

// TestMergeOfASubset: merging a clock whose channels dst already holds (the
// in-place path) raises exactly what the model raises.
func TestMergeOfASubset(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for range 2000 {
		a, ma := randClock(r, 16, false)
		b := new(Clock)
		mb := newModel()
		for ch := range ma.off {
			if r.IntN(2) == 0 {
				v := r.Int64N(1000)
				b.SetOffset(ch, v)
				mb.off[ch] = v
			}
		}
		a.Merge(b)
		for ch, v := range mb.off {
			ma.off[ch] = max(ma.off[ch], v)
		}
		checkAgainstModel(t, a, ma)
	}
}

func uniqueChannels(chs []Channel) []Channel {
	seen := map[Channel]bool{}
	var out []Channel
	for _, ch := range chs {
		if !seen[ch] {
			seen[ch] = true
			out = append(out, ch)
		}
	}
	return out
}

// TestTopicCompareMatchesKeyOrder: TopicID.Compare, with its equality
// shortcut, orders topics as a clock's internal keys do, and only equal
// IDs compare equal.
func TestTopicCompareMatchesKeyOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	pick := func() TopicID {
		if r.IntN(2) == 0 {
			return topicPool[r.IntN(len(topicPool))]
		}
		var id TopicID
		for i := range id {
			id[i] = byte(r.IntN(3)) * 0x7f // 0x00, 0x7f, 0xfe: both sides of the sign bit
		}
		return id
	}
	for range 5000 {
		a, b := pick(), pick()
		want := keyOf(Channel{Topic: a}).compare(keyOf(Channel{Topic: b}))
		if got := a.Compare(b); got != want {
			t.Fatalf("%s.Compare(%s) = %d, key order says %d", a, b, got, want)
		}
	}
}
