package headers

import (
	"math"
	"slices"
)

// NoOffset is what Clock.OffsetsOf reports for a channel the clock claims
// nothing on: below every offset.
const NoOffset = math.MinInt64

// ChannelList is a sorted list of channels prepared for repeated lookups in
// clocks: a causal node asks every record's clock for the same few input
// channels, and converting each channel to the clock's internal key on
// every lookup was a large share of that.
type ChannelList struct {
	keys []chanKey
}

// NewChannelList returns the list of chs in Channel order.
func NewChannelList(chs []Channel) ChannelList {
	keys := make([]chanKey, len(chs))
	for i, ch := range chs {
		keys[i] = keyOf(ch)
	}
	slices.SortFunc(keys, chanKey.compare)
	return ChannelList{keys: keys}
}

// Len returns the number of channels in the list.
func (l *ChannelList) Len() int { return len(l.keys) }

// OffsetsOf sets out[i] to the offset c claims on l's i-th channel, or to
// NoOffset when it claims none, and returns out resized to l.Len(). It
// allocates only when out's capacity is short.
func (c *Clock) OffsetsOf(l *ChannelList, out []int64) []int64 {
	out = slices.Grow(out[:0], len(l.keys))[:len(l.keys)]
	es := c.offsets
	if len(es) > 8*len(l.keys) {
		// A wide clock and few channels: search rather than walk.
		for i, k := range l.keys {
			out[i] = NoOffset
			lo, hi := 0, len(es)
			for lo < hi {
				m := int(uint(lo+hi) >> 1)
				if es[m].key.compare(k) < 0 {
					lo = m + 1
				} else {
					hi = m
				}
			}
			if lo < len(es) && es[lo].key == k {
				out[i] = es[lo].off
			}
		}
		return out
	}
	j := 0
	for i, k := range l.keys {
		out[i] = NoOffset
		for j < len(es) && es[j].key.compare(k) < 0 {
			j++
		}
		if j < len(es) && es[j].key == k {
			out[i] = es[j].off
		}
	}
	return out
}
