package protocol

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/parsley-go/parsley/headers"
)

// TestSearchChannelMatchesBinarySearch compares searchChannel with the
// standard library's search over random sorted channel sets, for present
// and absent channels, including topics whose IDs differ only in the low
// half and partitions on either side of every entry.
func TestSearchChannelMatchesBinarySearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	topic := func() headers.TopicID {
		var id headers.TopicID
		id[0] = byte(rng.IntN(3)) * 0x80 // both signs of the high half
		id[15] = byte(rng.IntN(3))
		return id
	}
	for round := range 500 {
		var chs []headers.Channel
		for range rng.IntN(12) {
			ch := headers.Channel{Topic: topic(), Partition: rng.Int32N(6)}
			if i, found := slices.BinarySearchFunc(chs, ch, headers.Channel.Compare); !found {
				chs = slices.Insert(chs, i, ch)
			}
		}
		for range 20 {
			ch := headers.Channel{Topic: topic(), Partition: rng.Int32N(7) - 1}
			wi, wf := slices.BinarySearchFunc(chs, ch, headers.Channel.Compare)
			if gi, gf := searchChannel(chs, ch); gi != wi || gf != wf {
				t.Fatalf("round %d: searchChannel(%v, %v) = %d, %v; want %d, %v", round, chs, ch, gi, gf, wi, wf)
			}
		}
	}
}
