package headers

import (
	"encoding/binary"
	"math"
)

// HeaderCauses is the header of the causes dialect.
const HeaderCauses = "parsley.causes"

// CausesVersion is the only version of the causes grammar.
const CausesVersion = 1

// ReservedPrefix starts every header name reserved for Parsley.
const ReservedPrefix = "parsley."

// maxPosition is 2⁶³−1: no genuine cause names it, so the grammar refuses it.
const maxPosition = math.MaxInt64

// minGroupSize is the smallest encoded group: topic ID, a one-byte partition
// count, a one-byte partition and a position.
const minGroupSize = 16 + 1 + 1 + 8

// CausesSize returns the encoded length of c in the causes dialect. It
// assumes c is encodable (see AppendCauses).
func CausesSize(c *Clock) int {
	es := c.offsets
	n := 1 + uvarintLen(uint32(countTopics(es)))
	for i := 0; i < len(es); {
		j := i
		for j < len(es) && es[j].key.sameTopic(es[i].key) {
			n += uvarintLen(uint32(es[j].key.part)) + 8
			j++
		}
		n += 16 + uvarintLen(uint32(j-i))
		i = j
	}
	return n
}

func countTopics(es []offsetEntry) int {
	n := 0
	for i := range es {
		if i == 0 || !es[i].key.sameTopic(es[i-1].key) {
			n++
		}
	}
	return n
}

// EncodeCauses returns c in the causes dialect (parsley.causes, version 1).
// The encoding is canonical: equal clocks give identical bytes.
func EncodeCauses(c *Clock) ([]byte, error) {
	if err := checkCauses(c); err != nil {
		return nil, err
	}
	return appendCauses(make([]byte, 0, CausesSize(c)), c), nil
}

// AppendCauses appends c in the causes dialect to dst and returns the
// extended buffer. It fails with ErrUnencodable, leaving dst unchanged, if c
// has sequence entries (the dialect carries offset entries only), the zero
// topic ID, a negative partition, or a position outside [0, 2⁶³−1).
func AppendCauses(dst []byte, c *Clock) ([]byte, error) {
	if err := checkCauses(c); err != nil {
		return dst, err
	}
	return appendCauses(dst, c), nil
}

// zeroTopicKey is the in-memory form of the reserved zero topic ID.
var zeroTopicKey = keyOf(Channel{})

func checkCauses(c *Clock) error {
	if len(c.seqs) > 0 {
		return &EncodeError{Dialect: HeaderCauses, Reason: "sequence entries cannot be expressed (first on channel " + c.seqs[0].key.channel().String() + ")"}
	}
	for i := range c.offsets {
		e := &c.offsets[i]
		switch {
		case e.key.sameTopic(zeroTopicKey):
			return &EncodeError{Dialect: HeaderCauses, Reason: "zero topic ID"}
		case e.key.part < 0:
			return &EncodeError{Dialect: HeaderCauses, Reason: "negative partition on channel " + e.key.channel().String()}
		case e.off < 0 || e.off >= maxPosition:
			return &EncodeError{Dialect: HeaderCauses, Reason: "position " + itoa(e.off) + " out of range on channel " + e.key.channel().String()}
		}
	}
	return nil
}

func appendCauses(dst []byte, c *Clock) []byte {
	es := c.offsets
	dst = append(dst, CausesVersion)
	dst = appendUvarint(dst, uint32(countTopics(es)))
	if mixedLowHalves(es) {
		forGroupsInOrder(es, compareTopicBytes, func(g []offsetEntry) { dst = appendGroups(dst, g) })
		return dst
	}
	// Signed order puts IDs with the top bit set first; unsigned byte
	// order puts them last. Nothing else differs, so swap the two runs.
	s := splitTopBit(es)
	dst = appendGroups(dst, es[s:])
	return appendGroups(dst, es[:s])
}

// appendGroups encodes the topic groups of es, in the order given.
func appendGroups(dst []byte, es []offsetEntry) []byte {
	for i := 0; i < len(es); {
		j := i + 1
		for j < len(es) && es[j].key.sameTopic(es[i].key) {
			j++
		}
		dst = binary.BigEndian.AppendUint64(dst, es[i].key.hi^signBit)
		dst = binary.BigEndian.AppendUint64(dst, es[i].key.lo^signBit)
		dst = appendUvarint(dst, uint32(j-i))
		for k := i; k < j; k++ {
			dst = appendUvarint(dst, uint32(es[k].key.part))
			dst = binary.BigEndian.AppendUint64(dst, uint64(es[k].off))
		}
		i = j
	}
	return dst
}

// splitTopBit returns the index where the top bit of the topics' most
// significant halves changes; entries sorted in either order change it at
// most once.
func splitTopBit(es []offsetEntry) int {
	for i := 1; i < len(es); i++ {
		if es[i].key.hi>>63 != es[0].key.hi>>63 {
			return i
		}
	}
	return len(es)
}

// mixedLowHalves reports whether two different topics share their most
// significant half but differ in the top bit of the least significant one:
// the only case where swapping runs does not convert between the orders.
func mixedLowHalves(es []offsetEntry) bool {
	for i := 1; i < len(es); i++ {
		a, b := es[i-1].key, es[i].key
		if a.hi == b.hi && a.lo != b.lo && a.lo>>63 != b.lo>>63 {
			return true
		}
	}
	return false
}

// compareTopicSigned and compareTopicBytes order the topics of two keys:
// the clock's (Java's signed) order, and the causes dialect's unsigned byte
// order.
func compareTopicSigned(a, b chanKey) int { return compareHalves(a.hi, a.lo, b.hi, b.lo) }

func compareTopicBytes(a, b chanKey) int {
	return compareHalves(a.hi^signBit, a.lo^signBit, b.hi^signBit, b.lo^signBit)
}

// topicClass sorts a topic into one of four classes by the top bits of its
// two halves. Within a class, the clock's signed order and the causes
// dialect's unsigned byte order agree, so converting between the two orders
// is a four-way merge of already sorted runs: linear, and allocation-free.
func topicClass(k chanKey) int { return int(k.hi>>63)<<1 | int(k.lo>>63) }

// forGroupsInOrder calls f for each topic group of es (entries sorted by
// either order, so each topic's entries are contiguous and the groups of one
// class are in both orders at once) in the order cmp gives.
func forGroupsInOrder(es []offsetEntry, cmp func(a, b chanKey) int, f func([]offsetEntry)) {
	n := len(es)
	nextOfClass := func(from, k int) int {
		for from < n && topicClass(es[from].key) != k {
			from++
		}
		return from
	}
	var cur [4]int
	for k := range cur {
		cur[k] = nextOfClass(0, k)
	}
	for {
		best := -1
		for k := range cur {
			if cur[k] < n && (best < 0 || cmp(es[cur[k]].key, es[cur[best]].key) < 0) {
				best = k
			}
		}
		if best < 0 {
			return
		}
		i := cur[best]
		j := i + 1
		for j < n && es[j].key.sameTopic(es[i].key) {
			j++
		}
		f(es[i:j])
		cur[best] = nextOfClass(j, best)
	}
}

// DecodeCauses decodes a parsley.causes value.
func DecodeCauses(b []byte) (*Clock, error) {
	// A pair takes at least nine bytes, so this bounds the entries without
	// trusting the counts.
	c := &Clock{offsets: make([]offsetEntry, 0, len(b)/9)}
	if err := DecodeCausesInto(c, b); err != nil {
		return nil, err
	}
	return c, nil
}

// DecodeCausesInto decodes a parsley.causes value into c, replacing its
// contents and reusing its storage. On error c is left empty.
//
// Every constraint the grammar makes decidable from the bytes is enforced:
// the version, exact group and pair counts with no trailing bytes, minimal
// varints of at most five bytes spelling 0 to 2³¹−1, strictly ascending topic
// IDs and partitions, no zero topic ID, and positions in [0, 2⁶³−1). A nil or
// empty value is undecodable: a present header must carry a value.
func DecodeCausesInto(c *Clock, b []byte) error {
	c.Reset()
	if err := decodeCauses(c, b); err != nil {
		c.Reset()
		return err
	}
	return nil
}

func causesErr(off int, reason string) error {
	return &DecodeError{Header: HeaderCauses, Offset: off, Reason: reason}
}

func decodeCauses(c *Clock, b []byte) error {
	if len(b) == 0 {
		return causesErr(0, "empty value")
	}
	if b[0] != CausesVersion {
		return causesErr(0, "unknown version "+itoa(int64(b[0])))
	}
	p := 1
	topics, n, err := readUvarint(b, p)
	if err != nil {
		return err
	}
	p += n
	if int64(topics)*minGroupSize > int64(len(b)-p) {
		return causesErr(p-n, "topic count "+itoa(int64(topics))+" exceeds the value's length")
	}
	var prev chanKey
	for g := 0; g < int(topics); g++ {
		if len(b)-p < 16 {
			return causesErr(p, "truncated topic ID")
		}
		key := chanKey{hi: binary.BigEndian.Uint64(b[p:]) ^ signBit, lo: binary.BigEndian.Uint64(b[p+8:]) ^ signBit}
		if key.sameTopic(zeroTopicKey) {
			return causesErr(p, "zero topic ID")
		}
		if g > 0 && compareTopicBytes(prev, key) >= 0 {
			return causesErr(p, "topic IDs not strictly ascending")
		}
		prev = key
		p += 16
		parts, n, err := readUvarint(b, p)
		if err != nil {
			return err
		}
		if parts == 0 {
			return causesErr(p, "partition count zero")
		}
		p += n
		if int64(parts)*(1+8) > int64(len(b)-p) {
			return causesErr(p-n, "partition count "+itoa(int64(parts))+" exceeds the value's length")
		}
		prevPart := int32(-1)
		for k := 0; k < int(parts); k++ {
			part, n, err := readUvarint(b, p)
			if err != nil {
				return err
			}
			if int32(part) <= prevPart {
				return causesErr(p, "partitions not strictly ascending")
			}
			prevPart = int32(part)
			p += n
			if len(b)-p < 8 {
				return causesErr(p, "truncated position")
			}
			pos := int64(binary.BigEndian.Uint64(b[p:]))
			if pos < 0 {
				return causesErr(p, "negative position")
			}
			if pos == maxPosition {
				return causesErr(p, "position 2^63-1 is reserved")
			}
			p += 8
			key.part = int32(part)
			c.offsets = append(c.offsets, offsetEntry{key: key, off: pos})
		}
	}
	if p != len(b) {
		return causesErr(p, itoa(int64(len(b)-p))+" trailing bytes")
	}
	if topics > 1 && !groupsSorted(c.offsets) {
		// The wire lists topics in unsigned byte order; the clock keeps
		// Java's signed order.
		es := c.offsets
		spare := c.spare[:0]
		if mixedLowHalves(es) {
			forGroupsInOrder(es, compareTopicSigned, func(g []offsetEntry) { spare = append(spare, g...) })
		} else {
			s := splitTopBit(es)
			spare = append(append(spare, es[s:]...), es[:s]...)
		}
		c.offsets, c.spare = spare, es
	}
	return nil
}

func groupsSorted(es []offsetEntry) bool {
	for i := 1; i < len(es); i++ {
		if compareTopicSigned(es[i-1].key, es[i].key) > 0 {
			return false
		}
	}
	return true
}

// readUvarint reads a minimal base-128 varint of at most five bytes spelling
// a value in [0, 2³¹−1], starting at b[p]. It returns the value and its
// length.
func readUvarint(b []byte, p int) (uint32, int, error) {
	if p < len(b) && b[p] < 0x80 { // one byte: the common case
		return uint32(b[p]), 1, nil
	}
	var v uint32
	for i := 0; i < 5; i++ {
		if p+i >= len(b) {
			return 0, 0, causesErr(p+i, "truncated varint")
		}
		x := b[p+i]
		if i == 4 {
			// The fifth byte may carry only the top three bits of a 31-bit
			// value, and no continuation.
			if x&^0x07 != 0 {
				return 0, 0, causesErr(p+i, "varint fifth byte out of range")
			}
		}
		v |= uint32(x&0x7f) << (7 * i)
		if x&0x80 == 0 {
			if i > 0 && x == 0 {
				return 0, 0, causesErr(p+i, "non-minimal varint")
			}
			return v, i + 1, nil
		}
	}
	// Unreachable: the fifth byte either terminates or is rejected above.
	return 0, 0, causesErr(p+4, "varint longer than five bytes")
}

func uvarintLen(v uint32) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func appendUvarint(dst []byte, v uint32) []byte {
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}
