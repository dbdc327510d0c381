package stage

import "github.com/parsley-go/parsley/internal/kafkahash"

// Partitioning: Kafka's murmur2 key hash (internal/kafkahash) for emissions. The group balancer
// that co-partitions tasks is in balancer.go.

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
	return kafkahash.Partition(key, partitions)
}
