// Package kafkahash is Kafka's default partitioner's key hash, in one place
// for everything that must agree on where a key lives: the stage sends a
// keyed emission to Partition's answer, and a view looks for a key's state
// in the task of that partition.
package kafkahash

// Murmur2 is Kafka's key hash (org.apache.kafka.common.utils.Utils.murmur2).
func Murmur2(data []byte) int32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	n := len(data)
	h := seed ^ uint32(n)
	for i := 0; i+4 <= n; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := n &^ 3
	switch n & 3 {
	case 3:
		h ^= uint32(data[tail+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[tail+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[tail])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// Partition is the partition Kafka's default partitioner (Java's, and
// franz-go's StickyKeyPartitioner) gives a non-nil key among n: murmur2 of
// the key made positive, modulo n. n must be positive.
func Partition(key []byte, n int32) int32 {
	return (Murmur2(key) & 0x7fffffff) % n
}
