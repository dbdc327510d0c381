package headers

import (
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
// channel then sender), so iteration is deterministic, equal clocks encode to
// identical bytes, and merge and dominance are linear walks. A Clock is not
// safe for concurrent mutation.
type Clock struct {
	offsets []OffsetEntry
	seqs    []SeqEntry

	// spare is storage DecodeCausesInto reorders into; kept so a reused
	// clock decodes without allocating.
	spare []OffsetEntry
}

func compareSeqKey(a SeqEntry, ch Channel, s SenderID) int {
	if r := a.Channel.Compare(ch); r != 0 {
		return r
	}
	return a.Sender.Compare(s)
}

func (c *Clock) findOffset(ch Channel) (int, bool) {
	return slices.BinarySearchFunc(c.offsets, ch, func(e OffsetEntry, ch Channel) int {
		return e.Channel.Compare(ch)
	})
}

func (c *Clock) findSeq(ch Channel, s SenderID) (int, bool) {
	return slices.BinarySearchFunc(c.seqs, SeqEntry{Channel: ch, Sender: s}, func(e, t SeqEntry) int {
		return compareSeqKey(e, t.Channel, t.Sender)
	})
}

// SetOffset raises the offset watermark for ch to offset; a lower offset than
// the current watermark changes nothing.
func (c *Clock) SetOffset(ch Channel, offset int64) {
	i, ok := c.findOffset(ch)
	if ok {
		if offset > c.offsets[i].Offset {
			c.offsets[i].Offset = offset
		}
		return
	}
	c.offsets = slices.Insert(c.offsets, i, OffsetEntry{Channel: ch, Offset: offset})
}

// Offset returns the offset watermark for ch and whether the clock has one.
func (c *Clock) Offset(ch Channel) (int64, bool) {
	i, ok := c.findOffset(ch)
	if !ok {
		return 0, false
	}
	return c.offsets[i].Offset, true
}

// DeleteOffset removes the offset entry for ch, if any.
func (c *Clock) DeleteOffset(ch Channel) {
	if i, ok := c.findOffset(ch); ok {
		c.offsets = slices.Delete(c.offsets, i, i+1)
	}
}

// SetSeq raises the sequence watermark for (ch, sender) to seq; a lower seq
// than the current watermark changes nothing.
func (c *Clock) SetSeq(ch Channel, sender SenderID, seq int64) {
	i, ok := c.findSeq(ch, sender)
	if ok {
		if seq > c.seqs[i].Seq {
			c.seqs[i].Seq = seq
		}
		return
	}
	c.seqs = slices.Insert(c.seqs, i, SeqEntry{Channel: ch, Sender: sender, Seq: seq})
}

// Seq returns the sequence watermark for (ch, sender) and whether the clock
// has one.
func (c *Clock) Seq(ch Channel, sender SenderID) (int64, bool) {
	i, ok := c.findSeq(ch, sender)
	if !ok {
		return 0, false
	}
	return c.seqs[i].Seq, true
}

// DeleteSeq removes the sequence entry for (ch, sender), if any.
func (c *Clock) DeleteSeq(ch Channel, sender SenderID) {
	if i, ok := c.findSeq(ch, sender); ok {
		c.seqs = slices.Delete(c.seqs, i, i+1)
	}
}

// RetainOffsets keeps only the offset entries for which keep returns true,
// in place and in order.
func (c *Clock) RetainOffsets(keep func(OffsetEntry) bool) {
	c.offsets = slices.DeleteFunc(c.offsets, func(e OffsetEntry) bool { return !keep(e) })
}

// RetainSeqs keeps only the sequence entries for which keep returns true, in
// place and in order.
func (c *Clock) RetainSeqs(keep func(SeqEntry) bool) {
	c.seqs = slices.DeleteFunc(c.seqs, func(e SeqEntry) bool { return !keep(e) })
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
		for _, e := range c.offsets {
			if !yield(e) {
				return
			}
		}
	}
}

// SeqEntries iterates over the sequence entries in (channel, sender) order.
// The clock must not be modified during iteration.
func (c *Clock) SeqEntries() iter.Seq[SeqEntry] {
	return func(yield func(SeqEntry) bool) {
		for _, e := range c.seqs {
			if !yield(e) {
				return
			}
		}
	}
}

// AppendOffsetEntries appends the offset entries, in channel order, to dst.
func (c *Clock) AppendOffsetEntries(dst []OffsetEntry) []OffsetEntry {
	return append(dst, c.offsets...)
}

// AppendSeqEntries appends the sequence entries, in (channel, sender) order,
// to dst.
func (c *Clock) AppendSeqEntries(dst []SeqEntry) []SeqEntry {
	return append(dst, c.seqs...)
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
	c.seqs = mergeSeqs(c.seqs, o.seqs)
}

// mergeOffsets merges src into dst. When every channel of src is already in
// dst it raises in place; otherwise it merges from the back so no scratch
// buffer is needed.
func mergeOffsets(dst, src []OffsetEntry) []OffsetEntry {
	if len(src) == 0 {
		return dst
	}
	// Count the entries of src missing from dst, raising the shared ones.
	missing := 0
	i := 0
	for _, e := range src {
		for i < len(dst) && dst[i].Channel.Compare(e.Channel) < 0 {
			i++
		}
		if i < len(dst) && dst[i].Channel == e.Channel {
			if e.Offset > dst[i].Offset {
				dst[i].Offset = e.Offset
			}
			continue
		}
		missing++
	}
	if missing == 0 {
		return dst
	}
	n := len(dst)
	dst = slices.Grow(dst, missing)[:n+missing]
	// Merge from the back: w writes, i reads dst, j reads src.
	w, i, j := n+missing-1, n-1, len(src)-1
	for j >= 0 {
		if i >= 0 {
			switch r := dst[i].Channel.Compare(src[j].Channel); {
			case r > 0:
				dst[w] = dst[i]
				i--
				w--
				continue
			case r == 0: // already raised above
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

func mergeSeqs(dst, src []SeqEntry) []SeqEntry {
	if len(src) == 0 {
		return dst
	}
	missing := 0
	i := 0
	for _, e := range src {
		for i < len(dst) && compareSeqKey(dst[i], e.Channel, e.Sender) < 0 {
			i++
		}
		if i < len(dst) && dst[i].Channel == e.Channel && dst[i].Sender == e.Sender {
			if e.Seq > dst[i].Seq {
				dst[i].Seq = e.Seq
			}
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
			switch r := compareSeqKey(dst[i], src[j].Channel, src[j].Sender); {
			case r > 0:
				dst[w] = dst[i]
				i--
				w--
				continue
			case r == 0:
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
	i := 0
	for _, e := range o.offsets {
		for i < len(c.offsets) && c.offsets[i].Channel.Compare(e.Channel) < 0 {
			i++
		}
		if i == len(c.offsets) || c.offsets[i].Channel != e.Channel || c.offsets[i].Offset < e.Offset {
			return false
		}
	}
	i = 0
	for _, e := range o.seqs {
		for i < len(c.seqs) && compareSeqKey(c.seqs[i], e.Channel, e.Sender) < 0 {
			i++
		}
		if i == len(c.seqs) || c.seqs[i].Channel != e.Channel || c.seqs[i].Sender != e.Sender || c.seqs[i].Seq < e.Seq {
			return false
		}
	}
	return true
}
