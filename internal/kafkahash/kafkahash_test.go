package kafkahash

import (
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestMurmur2MatchesKafka: Kafka's own test vectors.
func TestMurmur2MatchesKafka(t *testing.T) {
	// Vectors from Kafka's UtilsTest.testMurmur2.
	vectors := map[string]int32{
		"21": -973932308, "foobar": -790332482, "a-little-bit-long-string": -985981536,
		"a-little-bit-longer-string": -1486304829, "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	for s, want := range vectors {
		if got := Murmur2([]byte(s)); got != want {
			t.Errorf("Murmur2(%q) = %d, want %d", s, got, want)
		}
	}
}

// TestPartitionMatchesFranzGo: keys land where franz-go's default
// partitioner puts them, which is where plain producers put them.
func TestPartitionMatchesFranzGo(t *testing.T) {
	part := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for i := range 500 {
		key := []byte(strings.Repeat("k", i%13) + string(rune('a'+i%26)) + strings.Repeat("z", i/26))
		for _, n := range []int32{1, 3, 7, 16, 64} {
			if got, want := Partition(key, n), int32(part.Partition(&kgo.Record{Key: key}, int(n))); got != want {
				t.Fatalf("Partition(%q, %d) = %d, franz-go says %d", key, n, got, want)
			}
		}
	}
}
