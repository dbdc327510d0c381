package saramaclock

import (
	"encoding/binary"
	"hash"

	"github.com/IBM/sarama"
)

// Murmur2Partitioner places a keyed message where Kafka's Java client,
// franz-go and a Parsley stage place it: murmur2 of the key bytes, made
// positive, modulo the partition count. A message without a key goes to a
// random partition.
//
// sarama's default (NewHashPartitioner, FNV-1a) disagrees with murmur2 on
// most keys; a stage task consumes partition p of each of its source
// topics, so a cause written to another partition number than its effect
// is consumed by another task and is not waited for.
//
// Deprecated: sarama has its own (v1.61.1, the version this module
// requires, has it): set
// cfg.Producer.Partitioner = sarama.NewMurmur2Partitioner. The two agree on
// every key (TestMurmur2PartitionersAgreeWithKafka).
var Murmur2Partitioner sarama.PartitionerConstructor = sarama.NewCustomPartitioner(
	sarama.WithAbsFirst(),
	sarama.WithCustomHashFunction(newMurmur2),
)

// murmur2 is Kafka's key hash (org.apache.kafka.common.utils.Utils.murmur2)
// as a hash.Hash32. It buffers the key: Kafka's hash of a key is not the
// hash of its parts.
type murmur2 struct{ buf []byte }

func newMurmur2() hash.Hash32 { return new(murmur2) }

func (h *murmur2) Write(p []byte) (int, error) { h.buf = append(h.buf, p...); return len(p), nil }
func (h *murmur2) Sum(b []byte) []byte         { return binary.BigEndian.AppendUint32(b, h.Sum32()) }
func (h *murmur2) Reset()                      { h.buf = h.buf[:0] }
func (h *murmur2) Size() int                   { return 4 }
func (h *murmur2) BlockSize() int              { return 4 }

func (h *murmur2) Sum32() uint32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	data := h.buf
	n := len(data)
	x := uint32(seed) ^ uint32(n)
	for len(data) >= 4 {
		k := binary.LittleEndian.Uint32(data)
		k *= m
		k ^= k >> r
		k *= m
		x *= m
		x ^= k
		data = data[4:]
	}
	switch len(data) {
	case 3:
		x ^= uint32(data[2]) << 16
		fallthrough
	case 2:
		x ^= uint32(data[1]) << 8
		fallthrough
	case 1:
		x ^= uint32(data[0])
		x *= m
	}
	x ^= x >> 13
	x *= m
	x ^= x >> 15
	return x
}
