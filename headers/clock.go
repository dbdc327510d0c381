package headers

import (
	"encoding/binary"
	"iter"
	"slices"
)

// OffsetEntry claims every record at or below Offset on Channel.
type OffsetEntry struct {
	Channel Channel
	Offset  int64
}

// SeqEntry claims every record Sender sent to Channel with a per-channel send
// sequence at or below Seq.
type SeqEntry struct {
	Channel Channel
	Sender  SenderID
	Seq     int64
}

// Clock is a dependency clock: offset entries (channel → watermark) and
// sequence entries ((channel, sender) → watermark). The zero value is the
// empty clock, ready to use.
//
// Entries are kept sorted (offset entries by channel, sequence entries by
// channel then sender, in Channel.Compare order), so iteration is
// deterministic, equal clocks encode to identical bytes, and merge and
// dominance are linear walks. A Clock is not safe for concurrent mutation,
// and must not be copied by value once used: copies share storage. Use Clone
// or CopyFrom.
type Clock struct {
	offsets []offsetEntry
	seqs    []seqEntry

	// spare is storage DecodeCausesInto reorders into; kept so a reused
	// clock decodes without allocating.
	spare []offsetEntry
}

// The in-memory form of a channel keeps the topic ID as two integers with
// the sign bit flipped, so plain unsigned comparisons give Java's signed
// UUID order and equality is three machine compares.
type chanKey struct {
	hi, lo uint64
	part   int32
}

const signBit = 1 << 63

func keyOf(ch Channel) chanKey {
	return chanKey{
		hi:   binary.BigEndian.Uint64(ch.Topic[:8]) ^ signBit,
		lo:   binary.BigEndian.Uint64(ch.Topic[8:]) ^ signBit,
		part: ch.Partition,
	}
}

func (k chanKey) channel() Channel {
	var ch Channel
	binary.BigEndian.PutUint64(ch.Topic[:8], k.hi^signBit)
	binary.BigEndian.PutUint64(ch.Topic[8:], k.lo^signBit)
	ch.Partition = k.part
	return ch
}

func (k chanKey) sameTopic(o chanKey) bool { return k.hi == o.hi && k.lo == o.lo }

func (k chanKey) compare(o chanKey) int {
	if r := compareHalves(k.hi, k.lo, o.hi, o.lo); r != 0 {
		return r
	}
	switch {
	case k.part < o.part:
		return -1
	case k.part > o.part:
		return 1
	}
	return 0
}

// less reports whether k sorts before o; it is compare(o) < 0 without
// building the three-way result.
func (k chanKey) less(o chanKey) bool {
	switch {
	case k.hi != o.hi:
		return k.hi < o.hi
	case k.lo != o.lo:
		return k.lo < o.lo
	}
	return k.part < o.part
}

// compareHalves orders two 128-bit IDs held as sign-flipped halves: Java's
// signed UUID order, as plain unsigned compares.
func compareHalves(ahi, alo, bhi, blo uint64) int {
	switch {
	case ahi != bhi:
		return cmpU64(ahi, bhi)
	case alo != blo:
		return cmpU64(alo, blo)
	}
	return 0
}

func cmpU64(a, b uint64) int {
	if a < b {
		return -1
	}
	return 1
}

type senderKey struct{ hi, lo uint64 }

func senderKeyOf(s SenderID) senderKey {
	return senderKey{binary.BigEndian.Uint64(s[:8]) ^ signBit, binary.BigEndian.Uint64(s[8:]) ^ signBit}
}

func (k senderKey) id() SenderID {
	var s SenderID
	binary.BigEndian.PutUint64(s[:8], k.hi^signBit)
	binary.BigEndian.PutUint64(s[8:], k.lo^signBit)
	return s
}

type offsetEntry struct {
	key chanKey
	off int64
}

type seqEntry struct {
	key    chanKey
	sender senderKey
	seq    int64
}

func (e *offsetEntry) public() OffsetEntry {
	return OffsetEntry{Channel: e.key.channel(), Offset: e.off}
}

func (e *seqEntry) public() SeqEntry {
	return SeqEntry{Channel: e.key.channel(), Sender: e.sender.id(), Seq: e.seq}
}

func (e *seqEntry) compare(o *seqEntry) int {
	if r := e.key.compare(o.key); r != 0 {
		return r
	}
	return compareHalves(e.sender.hi, e.sender.lo, o.sender.hi, o.sender.lo)
}

func (c *Clock) findOffset(k chanKey) (int, bool) {
	return slices.BinarySearchFunc(c.offsets, k, func(e offsetEntry, k chanKey) int { return e.key.compare(k) })
}

// findSeq is a hand-written binary search: a closure over the search key
// would make the key escape, and SetSeq sits on every stamp.
func (c *Clock) findSeq(t *seqEntry) (int, bool) {
	lo, hi := 0, len(c.seqs)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if c.seqs[m].compare(t) < 0 {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo, lo < len(c.seqs) && c.seqs[lo].compare(t) == 0
}

// SetOffset raises the offset watermark for ch to offset; a lower offset than
// the current watermark changes nothing.
func (c *Clock) SetOffset(ch Channel, offset int64) {
	k := keyOf(ch)
	i, ok := c.findOffset(k)
	if ok {
		if offset > c.offsets[i].off {
			c.offsets[i].off = offset
		}
		return
	}
	c.offsets = slices.Insert(c.offsets, i, offsetEntry{key: k, off: offset})
}

// Offset returns the offset watermark for ch and whether the clock has one.
func (c *Clock) Offset(ch Channel) (int64, bool) {
	i, ok := c.findOffset(keyOf(ch))
	if !ok {
		return 0, false
	}
	return c.offsets[i].off, true
}

// DeleteOffset removes the offset entry for ch, if any.
func (c *Clock) DeleteOffset(ch Channel) {
	if i, ok := c.findOffset(keyOf(ch)); ok {
		c.offsets = slices.Delete(c.offsets, i, i+1)
	}
}

// SetSeq raises the sequence watermark for (ch, sender) to seq; a lower seq
// than the current watermark changes nothing.
func (c *Clock) SetSeq(ch Channel, sender SenderID, seq int64) {
	t := seqEntry{key: keyOf(ch), sender: senderKeyOf(sender), seq: seq}
	i, ok := c.findSeq(&t)
	if ok {
		if seq > c.seqs[i].seq {
			c.seqs[i].seq = seq
		}
		return
	}
	c.seqs = slices.Insert(c.seqs, i, t)
}

// Seq returns the sequence watermark for (ch, sender) and whether the clock
// has one.
func (c *Clock) Seq(ch Channel, sender SenderID) (int64, bool) {
	i, ok := c.findSeq(&seqEntry{key: keyOf(ch), sender: senderKeyOf(sender)})
	if !ok {
		return 0, false
	}
	return c.seqs[i].seq, true
}

// DeleteSeq removes the sequence entry for (ch, sender), if any.
func (c *Clock) DeleteSeq(ch Channel, sender SenderID) {
	if i, ok := c.findSeq(&seqEntry{key: keyOf(ch), sender: senderKeyOf(sender)}); ok {
		c.seqs = slices.Delete(c.seqs, i, i+1)
	}
}

// RetainOffsets keeps only the offset entries for which keep returns true,
// in place and in order.
func (c *Clock) RetainOffsets(keep func(OffsetEntry) bool) {
	c.offsets = slices.DeleteFunc(c.offsets, func(e offsetEntry) bool { return !keep(e.public()) })
}

// RetainSeqs keeps only the sequence entries for which keep returns true, in
// place and in order.
func (c *Clock) RetainSeqs(keep func(SeqEntry) bool) {
	c.seqs = slices.DeleteFunc(c.seqs, func(e seqEntry) bool { return !keep(e.public()) })
}

// NumOffsets returns the number of offset entries.
func (c *Clock) NumOffsets() int { return len(c.offsets) }

// NumSeqs returns the number of sequence entries.
func (c *Clock) NumSeqs() int { return len(c.seqs) }

// IsEmpty reports whether the clock claims nothing.
func (c *Clock) IsEmpty() bool { return len(c.offsets) == 0 && len(c.seqs) == 0 }

// OffsetEntries iterates over the offset entries in channel order. The clock
// must not be modified during iteration.
func (c *Clock) OffsetEntries() iter.Seq[OffsetEntry] {
	return func(yield func(OffsetEntry) bool) {
		for i := range c.offsets {
			if !yield(c.offsets[i].public()) {
				return
			}
		}
	}
}

// SeqEntries iterates over the sequence entries in (channel, sender) order.
// The clock must not be modified during iteration.
func (c *Clock) SeqEntries() iter.Seq[SeqEntry] {
	return func(yield func(SeqEntry) bool) {
		for i := range c.seqs {
			if !yield(c.seqs[i].public()) {
				return
			}
		}
	}
}

// AppendOffsetEntries appends the offset entries, in channel order, to dst.
func (c *Clock) AppendOffsetEntries(dst []OffsetEntry) []OffsetEntry {
	for i := range c.offsets {
		dst = append(dst, c.offsets[i].public())
	}
	return dst
}

// AppendSeqEntries appends the sequence entries, in (channel, sender) order,
// to dst.
func (c *Clock) AppendSeqEntries(dst []SeqEntry) []SeqEntry {
	for i := range c.seqs {
		dst = append(dst, c.seqs[i].public())
	}
	return dst
}

// Reset empties the clock, keeping its storage for reuse.
func (c *Clock) Reset() {
	c.offsets = c.offsets[:0]
	c.seqs = c.seqs[:0]
}

// Clone returns an independent copy of c.
func (c *Clock) Clone() *Clock {
	return &Clock{offsets: slices.Clone(c.offsets), seqs: slices.Clone(c.seqs)}
}

// CopyFrom makes c equal to o, reusing c's storage.
func (c *Clock) CopyFrom(o *Clock) {
	c.offsets = append(c.offsets[:0], o.offsets...)
	c.seqs = append(c.seqs[:0], o.seqs...)
}

// Equal reports whether c and o hold exactly the same entries.
func (c *Clock) Equal(o *Clock) bool {
	return slices.Equal(c.offsets, o.offsets) && slices.Equal(c.seqs, o.seqs)
}

// Merge raises c to the pointwise maximum of c and o, for both kinds of
// entry.
func (c *Clock) Merge(o *Clock) {
	c.offsets = mergeOffsets(c.offsets, o.offsets)
	c.seqs = mergeSorted(c.seqs, o.seqs, compareSeqEntries, raiseSeq)
}

func compareSeqEntries(a, b *seqEntry) int { return a.compare(b) }

func raiseSeq(dst, src *seqEntry) {
	if src.seq > dst.seq {
		dst.seq = src.seq
	}
}

// mergeOffsets is mergeSorted for offset entries, with direct calls and a
// fast path for clocks of the same shape: it sits on the receive path.
func mergeOffsets(dst, src []offsetEntry) []offsetEntry {
	if len(dst) == len(src) {
		k := 0
		for k < len(src) && dst[k].key == src[k].key {
			if src[k].off > dst[k].off {
				dst[k].off = src[k].off
			}
			k++
		}
		if k == len(src) {
			return dst
		}
	}
	if len(dst) == 0 {
		return append(dst, src...)
	}
	// Every channel of src already in dst (a record's clock folded into a
	// wider aggregate of the same stream): raise in place with direct
	// compares; mergeSorted's indirect calls cost twice as much. Most
	// entries of src match the next entry of dst, so equality, three
	// machine compares, is tested before order.
	i, j := 0, 0
	for i < len(dst) && j < len(src) {
		switch {
		case dst[i].key == src[j].key:
			if src[j].off > dst[i].off {
				dst[i].off = src[j].off
			}
			i++
			j++
		case dst[i].key.less(src[j].key):
			i++
		default:
			i = len(dst) // src[j] is not in dst
		}
	}
	if j == len(src) {
		return dst
	}
	return mergeSorted(dst, src, func(a, b *offsetEntry) int { return a.key.compare(b.key) }, func(d, s *offsetEntry) {
		if s.off > d.off {
			d.off = s.off
		}
	})
}

// mergeSorted merges the sorted src into the sorted dst, raising shared
// entries. When every key of src is already in dst (the common case on a
// stream whose clocks share their channels) it works in place; otherwise it
// grows dst once and merges from the back, so it needs no scratch buffer.
func mergeSorted[E any](dst, src []E, cmp func(a, b *E) int, raise func(dst, src *E)) []E {
	if len(src) == 0 {
		return dst
	}
	missing := 0
	i := 0
	for j := range src {
		for i < len(dst) && cmp(&dst[i], &src[j]) < 0 {
			i++
		}
		if i < len(dst) && cmp(&dst[i], &src[j]) == 0 {
			raise(&dst[i], &src[j])
			continue
		}
		missing++
	}
	if missing == 0 {
		return dst
	}
	n := len(dst)
	dst = slices.Grow(dst, missing)[:n+missing]
	w, i, j := n+missing-1, n-1, len(src)-1
	for j >= 0 {
		if i >= 0 {
			switch r := cmp(&dst[i], &src[j]); {
			case r > 0:
				dst[w] = dst[i]
				i--
				w--
				continue
			case r == 0: // raised in the first pass
				dst[w] = dst[i]
				i--
				j--
				w--
				continue
			}
		}
		dst[w] = src[j]
		j--
		w--
	}
	return dst
}

// Dominates reports whether c claims at least everything o claims: every
// offset entry of o has an entry in c at or above it, and likewise every
// sequence entry. Every clock dominates the empty clock.
func (c *Clock) Dominates(o *Clock) bool {
	return dominatesOffsets(c.offsets, o.offsets) && dominatesSeqs(c.seqs, o.seqs)
}

func dominatesOffsets(c, o []offsetEntry) bool {
	if len(o) > len(c) {
		return false
	}
	// Fast path: the same channels in the same order, as on a stream whose
	// records carry clocks of a stable shape.
	if len(c) == len(o) {
		k := 0
		for k < len(o) && c[k].key == o[k].key {
			if c[k].off < o[k].off {
				return false
			}
			k++
		}
		if k == len(o) {
			return true
		}
	}
	i := 0
	for j := range o {
		for i < len(c) && c[i].key.compare(o[j].key) < 0 {
			i++
		}
		if i == len(c) || c[i].key != o[j].key || c[i].off < o[j].off {
			return false
		}
	}
	return true
}

func dominatesSeqs(c, o []seqEntry) bool {
	if len(o) > len(c) {
		return false
	}
	i := 0
	for j := range o {
		for i < len(c) && c[i].compare(&o[j]) < 0 {
			i++
		}
		if i == len(c) || c[i].key != o[j].key || c[i].sender != o[j].sender || c[i].seq < o[j].seq {
			return false
		}
	}
	return true
}
