package protocol

import "github.com/parsley-go/parsley/headers"

// skel is what a hold queue keeps in memory per held record (reference 22):
// 32 bytes, whatever the width of the record's clock. The record itself lives
// in the store (or, until the next Flush, in queue.pending) and is read back
// when it becomes the head.
type skel struct {
	offset    int64
	timestamp int64
	seq       int64  // send sequence, when sender != 0
	sender    uint32 // 0 = untagged; else index+1 into Node.senders.ids
}

// queue is one channel's FIFO hold queue. Entries have store indices:
// skels[start] has index headIdx, and so on.
type queue struct {
	skels []skel
	start int

	headIdx     int64 // store index of the head
	storedHead  int64 // head index as of the last flush (entries below are deleted)
	flushedTail int64 // entries below this index are in the store

	// pending holds the records enqueued since the last flush that were not
	// the head on arrival, for indices pendingBase, pendingBase+1, ....
	pending     []Record
	pendingBase int64

	// The decoded head, when loaded.
	loaded   bool
	head     Record
	headStmp headers.Stamp
}

func (q *queue) len() int { return len(q.skels) - q.start }

func (q *queue) at(i int) *skel { return &q.skels[q.start+i] }

func (q *queue) tail() int64 { return q.headIdx + int64(q.len()) }

func (q *queue) push(k skel) {
	if q.start > 0 && q.start == len(q.skels) {
		q.skels, q.start = q.skels[:0], 0
	}
	q.skels = append(q.skels, k)
}

func (q *queue) pop() {
	q.start++
	q.headIdx++
	q.loaded = false
	q.head = Record{}
	switch {
	case q.start == len(q.skels) && cap(q.skels) > 4096:
		q.skels, q.start = nil, 0 // do not keep a drained burst's array
	case q.start == len(q.skels):
		q.skels, q.start = q.skels[:0], 0
	case q.start >= 1024 && q.start*2 >= len(q.skels):
		// Compact so a long-lived queue does not keep its delivered prefix.
		n := copy(q.skels, q.skels[q.start:])
		q.skels, q.start = q.skels[:n], 0
	}
}
