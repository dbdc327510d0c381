package view

import (
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestOwnerMatchesKgo: the view finds a key's task where franz-go's
// default (Kafka-compatible) partitioner put the key's records.
func TestOwnerMatchesKgo(t *testing.T) {
	tp := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for _, n := range []int32{1, 3, 7, 64} {
		v := &View[string, string]{nparts: n}
		for i := range 2000 {
			key := []byte("key-" + strconv.Itoa(i) + "-" + string(rune('a'+i%26)))
			if got, want := v.owner(key), int32(tp.Partition(&kgo.Record{Key: key}, int(n))); got != want {
				t.Fatalf("%d partitions: owner(%q) = %d, kgo partitions it to %d", n, key, got, want)
			}
		}
	}
}
