package stage

// Partitioning: Kafka's murmur2 key hash for emissions. The group balancer
// that co-partitions tasks is in balancer.go.

// murmur2 is Kafka's key hash (org.apache.kafka.common.utils.Utils.murmur2).
func murmur2(data []byte) int32 {
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

// partitionFor chooses the partition of an emission, deterministically so a
// replayed step sends every record where the first attempt did: a keyed
// record goes where Kafka's default partitioner sends it (murmur2 of the
// encoded key, positive, modulo the partition count), so plain Java and
// franz-go producers agree; a nil-keyed record goes to the task's partition
// modulo the sink's partition count.
func partitionFor(key []byte, nilKey bool, partitions, task int32) int32 {
	if nilKey {
		return task % partitions
	}
	return (murmur2(key) & 0x7fffffff) % partitions
}
