package protocol

import (
	"slices"

	"github.com/parsley-go/parsley/headers"
)

// Flush writes to the store every piece of state that changed since the
// last flush: frontiers, advertised clocks, delivered-sequence marks, send
// sequences, carried ancestry, and the hold queues (the records held since
// the last flush, deletions of persisted records delivered since, and the
// queue indices). The host calls it at the end of every step, before it
// commits the store with the step's consumed offsets and sends (host duty
// H3). Its work is proportional to what changed, not to queue depth: a
// record held since the last flush is written once and then lives in memory
// only as a 32-byte skeleton.
//
// Writes are issued in a fixed order (by channel, then by key kind), so two
// identical runs issue identical writes. A store error leaves the node
// failed (ErrNodeFailed): rebuild it from committed state.
func (n *Node) Flush() error {
	const op = "Flush"
	if err := n.check(op); err != nil {
		return err
	}
	st := n.store
	put := func(k string, v []byte) error {
		if err := st.Put(k, v); err != nil {
			return keyErr(op, k, n.fail(err))
		}
		return nil
	}
	for _, in := range n.inputs {
		if in.frontierDirty {
			if err := put(pfxFront+in.key, appendFrontier(make([]byte, 0, 16), in.frontier, in.claim)); err != nil {
				return err
			}
			in.frontierDirty = false
		}
		if in.ccDirty {
			b, err := headers.EncodeVC(&in.cc)
			if err != nil {
				return keyErr(op, pfxCC+in.key, n.fail(err))
			}
			if err := put(pfxCC+in.key, b); err != nil {
				return err
			}
			in.ccDirty = false
		}
		if len(in.dsDirty) > 0 {
			slices.SortFunc(in.dsDirty, headers.SenderID.Compare)
			for _, s := range in.dsDirty {
				if n.sabotage.has(sabForgetDeliveredSeqs) {
					break
				}
				m := in.ds[s]
				if err := put(dsKey(in.key, s), appendInt64(appendInt64(make([]byte, 0, 16), m.seq), m.offset)); err != nil {
					return err
				}
			}
			in.dsDirty = in.dsDirty[:0]
		}
		if err := n.flushQueue(in); err != nil {
			return err
		}
	}
	if n.caDirty {
		b, err := headers.EncodeVC(&n.carried)
		if err != nil {
			return keyErr(op, keyCarried, n.fail(err))
		}
		if err := put(keyCarried, b); err != nil {
			return err
		}
		n.caDirty = false
	}
	// putInts writes the changed per-channel integers under prefix, in
	// channel order, and forgets which changed.
	putInts := func(dirty *[]headers.Channel, prefix string, vals map[headers.Channel]int64) error {
		slices.SortFunc(*dirty, headers.Channel.Compare)
		for _, ch := range *dirty {
			if err := put(prefix+chanKey(ch), appendInt64(nil, vals[ch])); err != nil {
				return err
			}
		}
		*dirty = (*dirty)[:0]
		return nil
	}
	if err := putInts(&n.sqDirty, pfxSeq, n.sq); err != nil {
		return err
	}
	return putInts(&n.ackedDirty, pfxAcked, n.acked)
}

func (n *Node) flushQueue(in *input) error {
	const op = "Flush"
	q := &in.q
	tail := q.tail()
	if q.storedHead == q.headIdx && q.flushedTail == tail {
		return nil
	}
	if q.storedHead == q.flushedTail && q.len() == 0 {
		// Nothing was stored and nothing is held: records came and went
		// within the step. The stored indices still describe an empty
		// queue; rewind to them, so memory agrees with the store.
		q.headIdx, q.flushedTail = q.storedHead, q.storedHead
		clear(q.pending)
		q.pending = q.pending[:0]
		return nil
	}
	// Delete persisted records delivered since the last flush.
	for i := q.storedHead; i < min(q.headIdx, q.flushedTail); i++ {
		k := entryKey(in.key, i)
		if err := n.store.Delete(k); err != nil {
			return keyErr(op, k, n.fail(err))
		}
	}
	// Write records held since the last flush and still held.
	var buf []byte
	for i := max(q.headIdx, q.flushedTail); i < tail; i++ {
		var r *Record
		if i == q.headIdx && q.loaded && (len(q.pending) == 0 || i < q.pendingBase) {
			r = &q.head
		} else {
			r = &q.pending[i-q.pendingBase]
		}
		buf = appendHeld(make([]byte, 0, heldSize(r)), r)
		k := entryKey(in.key, i)
		if err := n.store.Put(k, buf); err != nil {
			return keyErr(op, k, n.fail(err))
		}
	}
	mk := metaKey(in.key)
	if err := n.store.Put(mk, appendInt64(appendInt64(make([]byte, 0, 16), q.headIdx), tail)); err != nil {
		return keyErr(op, mk, n.fail(err))
	}
	if cap(q.pending) > 1024 {
		q.pending = nil // do not keep a burst's worth of record headers alive
	} else {
		clear(q.pending)
		q.pending = q.pending[:0]
	}
	q.storedHead, q.flushedTail = q.headIdx, tail
	return nil
}
