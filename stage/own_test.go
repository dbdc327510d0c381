package stage

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestStepAcksKeepHighestPerChannel feeds acknowledgements in random
// order, as concurrent partition promises deliver them, and checks that
// the step keeps every send counted, the highest offset of each channel,
// and every negative offset unmerged for the node to refuse.
func TestStepAcksKeepHighestPerChannel(t *testing.T) {
	topics := map[string]topicMeta{
		"out":   {id: headers.TopicID{1}, partitions: 4},
		"audit": {id: headers.TopicID{2}, partitions: 2},
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var acks stepAcks
	for round := range 50 {
		acks.reset()
		want := make(map[headers.Channel]int64)
		var odd []headers.Coordinate
		n := rng.IntN(200)
		for range n {
			topic := "out"
			if rng.IntN(3) == 0 {
				topic = "audit"
			}
			p := rng.Int32N(topics[topic].partitions)
			off := rng.Int64N(1000)
			if rng.IntN(50) == 0 {
				off = -1
			}
			ch := headers.Channel{Topic: topics[topic].id, Partition: p}
			if off < 0 {
				odd = append(odd, headers.Coordinate{Channel: ch, Offset: off})
			} else if cur, ok := want[ch]; !ok || off > cur {
				want[ch] = off
			}
			acks.add(&kgo.Record{Topic: topic, Partition: p, Offset: off}, topics)
		}
		if acks.count != n {
			t.Fatalf("round %d: counted %d acknowledgements, want %d", round, acks.count, n)
		}
		got := make(map[headers.Channel]int64)
		for _, c := range acks.channels {
			if _, dup := got[c.at.Channel]; dup {
				t.Fatalf("round %d: channel %s kept twice", round, c.at.Channel)
			}
			got[c.at.Channel] = c.at.Offset
		}
		if len(got) != len(want) {
			t.Fatalf("round %d: %d channels, want %d", round, len(got), len(want))
		}
		for ch, o := range want {
			if got[ch] != o {
				t.Fatalf("round %d: channel %s at %d, want the highest, %d", round, ch, got[ch], o)
			}
		}
		if !slices.Equal(acks.odd, odd) {
			t.Fatalf("round %d: negative acknowledgements %v, want %v", round, acks.odd, odd)
		}
	}
}
