package stage

import "github.com/twmb/franz-go/pkg/kgo"

// emitBuffers hands out the memory of a step's emitted records: records
// from slabs and stamp bytes from shared buffers, so an emission costs a
// fraction of an allocation rather than two. Nothing handed out is ever
// reused: the producer keeps a record until its acknowledgement, and a slab
// lives while any of its records does. Slabs and buffers start small and
// double within a step, so a step of few emissions allocates little, and
// the task drops them when its step ends, so the next step does not keep a
// finished step's records alive.
type emitBuffers struct {
	records []outRecord // the current slab's records not yet handed out
	slab    int         // the current slab's size
	stamps  []byte      // stamp values; the bytes before len are handed out
}

const (
	maxRecordSlab = 32      // records per slab, at most
	minStampBuf   = 1 << 10 // bytes of the step's first stamp buffer
	maxStampBuf   = 8 << 10 // bytes per stamp buffer, at most
	stampRoom     = 256     // a new stamp buffer when less than this is left
)

// stampHeaders is how many headers a vc stamp adds: vc, vc-sender, vc-seq.
const stampHeaders = 3

// stampTagSize is the bytes of vc-sender and vc-seq.
const stampTagSize = 16 + 8

// outRecord is an emission's record with room for its headers, so the
// usual emission (the stamp and at most one application header) needs no
// header allocation of its own.
type outRecord struct {
	kgo.Record
	headers [stampHeaders + 1]kgo.RecordHeader
}

// record returns a zero record for one emission.
func (b *emitBuffers) record() *outRecord {
	if len(b.records) == 0 {
		b.slab = min(max(2*b.slab, 1), maxRecordSlab)
		b.records = make([]outRecord, b.slab)
	}
	r := &b.records[0]
	b.records = b.records[1:]
	return r
}

// stampBuf returns the buffer to append the next stamp's values to, with
// room for need bytes. When what is left is short it starts a new buffer
// (the values already handed out stay where they are), of room for four
// such stamps at least: growing the old one like append would copy the
// handed-out bytes too, every stamp once a stamp outgrows a buffer.
func (b *emitBuffers) stampBuf(need int) []byte {
	if c := cap(b.stamps); c-len(b.stamps) < max(need, stampRoom) {
		b.stamps = make([]byte, 0, max(min(max(2*c, minStampBuf), maxStampBuf), 4*need))
	}
	return b.stamps
}

// release drops the buffers at the end of a step.
func (b *emitBuffers) release() { *b = emitBuffers{} }
