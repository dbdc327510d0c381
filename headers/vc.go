package headers

import (
	"encoding/binary"
	"math"
	"slices"
)

// Header names of the vc dialect.
const (
	// HeaderVC carries the record's dependency clock.
	HeaderVC = "vc"
	// HeaderVCSender carries the stamping node's 16-byte sender ID.
	HeaderVCSender = "vc-sender"
	// HeaderVCSeq carries the record's 8-byte per-channel send sequence.
	HeaderVCSeq = "vc-seq"
)

// VCVersion is the only version of the vc clock layout.
const VCVersion = 1

const (
	vcOffsetEntrySize = 16 + 4 + 8
	vcSeqEntrySize    = 16 + 4 + 16 + 8
)

// VCSize returns the encoded length of c in the vc dialect.
func VCSize(c *Clock) int {
	return 1 + 4 + len(c.offsets)*vcOffsetEntrySize + 4 + len(c.seqs)*vcSeqEntrySize
}

// EncodeVC returns c in the vc dialect.
func EncodeVC(c *Clock) ([]byte, error) {
	return AppendVC(make([]byte, 0, VCSize(c)), c)
}

// AppendVC appends c in the vc dialect to dst and returns the extended
// buffer. It fails with ErrUnencodable, leaving dst's contents up to len(dst)
// unchanged, if an entry has a negative partition, offset or sequence.
func AppendVC(dst []byte, c *Clock) ([]byte, error) {
	n := len(dst)
	size := VCSize(c)
	out := slices.Grow(dst, size)[:n+size]
	b := out[n:]
	b[0] = VCVersion
	binary.BigEndian.PutUint32(b[1:], uint32(len(c.offsets)))
	b = b[5:]
	// One pass writes and checks: on a bad entry the caller gets dst back
	// as it was, and the bytes written past it are never visible.
	for i := range c.offsets {
		e := &c.offsets[i]
		if e.key.part < 0 || e.off < 0 {
			return dst, &EncodeError{Dialect: HeaderVC, Reason: "negative partition or offset on channel " + e.key.channel().String()}
		}
		q := b[:vcOffsetEntrySize]
		binary.BigEndian.PutUint64(q, e.key.hi^signBit)
		binary.BigEndian.PutUint64(q[8:], e.key.lo^signBit)
		binary.BigEndian.PutUint32(q[16:], uint32(e.key.part))
		binary.BigEndian.PutUint64(q[20:], uint64(e.off))
		b = b[vcOffsetEntrySize:]
	}
	binary.BigEndian.PutUint32(b, uint32(len(c.seqs)))
	b = b[4:]
	for i := range c.seqs {
		e := &c.seqs[i]
		if e.key.part < 0 || e.seq < 0 {
			return dst, &EncodeError{Dialect: HeaderVC, Reason: "negative partition or sequence on channel " + e.key.channel().String()}
		}
		q := b[:vcSeqEntrySize]
		binary.BigEndian.PutUint64(q, e.key.hi^signBit)
		binary.BigEndian.PutUint64(q[8:], e.key.lo^signBit)
		binary.BigEndian.PutUint32(q[16:], uint32(e.key.part))
		binary.BigEndian.PutUint64(q[20:], e.sender.hi^signBit)
		binary.BigEndian.PutUint64(q[28:], e.sender.lo^signBit)
		binary.BigEndian.PutUint64(q[36:], uint64(e.seq))
		b = b[vcSeqEntrySize:]
	}
	return out, nil
}

// DecodeVC decodes a vc clock value.
func DecodeVC(b []byte) (*Clock, error) {
	c := new(Clock)
	if err := DecodeVCInto(c, b); err != nil {
		return nil, err
	}
	return c, nil
}

// DecodeVCInto decodes a vc clock value into c, replacing its contents and
// reusing its storage. On error c is left empty.
//
// It rejects an unknown version, negative or oversized counts, a length that
// does not match the counts, unsorted or duplicate entries, and negative
// partitions, offsets or sequences.
func DecodeVCInto(c *Clock, b []byte) error {
	c.Reset()
	if err := decodeVC(c, b); err != nil {
		c.Reset()
		return err
	}
	return nil
}

func vcErr(off int, reason string) error {
	return &DecodeError{Header: HeaderVC, Offset: off, Reason: reason}
}

func decodeVC(c *Clock, b []byte) error {
	if len(b) == 0 {
		return vcErr(0, "empty value")
	}
	if b[0] != VCVersion {
		return vcErr(0, "unknown version "+itoa(int64(b[0])))
	}
	p := 1
	if len(b)-p < 4 {
		return vcErr(p, "truncated offset entry count")
	}
	n := int32(binary.BigEndian.Uint32(b[p:]))
	if n < 0 {
		return vcErr(p, "negative offset entry count")
	}
	p += 4
	// The counts are checked against the remaining length before anything is
	// allocated, so a hostile count cannot force a large allocation.
	if int64(n)*vcOffsetEntrySize > int64(len(b)-p) {
		return vcErr(p, "offset entry count "+itoa(int64(n))+" exceeds the value's length")
	}
	if cap(c.offsets) < int(n) {
		c.offsets = make([]offsetEntry, 0, n)
	}
	offs := c.offsets[:n]
	for i := range offs {
		e := &offs[i]
		q := b[p : p+vcOffsetEntrySize]
		e.key.hi = binary.BigEndian.Uint64(q) ^ signBit
		e.key.lo = binary.BigEndian.Uint64(q[8:]) ^ signBit
		e.key.part = int32(binary.BigEndian.Uint32(q[16:]))
		e.off = int64(binary.BigEndian.Uint64(q[20:]))
		if e.key.part < 0 {
			return vcErr(p+16, "negative partition")
		}
		if e.off < 0 {
			return vcErr(p+20, "negative offset")
		}
		if i > 0 && offs[i-1].key.compare(e.key) >= 0 {
			return vcErr(p, "offset entries not strictly ascending")
		}
		p += vcOffsetEntrySize
	}
	c.offsets = offs
	if len(b)-p < 4 {
		return vcErr(p, "truncated sequence entry count")
	}
	m := int32(binary.BigEndian.Uint32(b[p:]))
	if m < 0 {
		return vcErr(p, "negative sequence entry count")
	}
	p += 4
	if int64(m)*vcSeqEntrySize != int64(len(b)-p) {
		return vcErr(p, "sequence entry count "+itoa(int64(m))+" does not match the "+itoa(int64(len(b)-p))+" bytes left")
	}
	if cap(c.seqs) < int(m) {
		c.seqs = make([]seqEntry, 0, m)
	}
	seqs := c.seqs[:m]
	for i := range seqs {
		e := &seqs[i]
		q := b[p : p+vcSeqEntrySize]
		e.key.hi = binary.BigEndian.Uint64(q) ^ signBit
		e.key.lo = binary.BigEndian.Uint64(q[8:]) ^ signBit
		e.key.part = int32(binary.BigEndian.Uint32(q[16:]))
		e.sender.hi = binary.BigEndian.Uint64(q[20:]) ^ signBit
		e.sender.lo = binary.BigEndian.Uint64(q[28:]) ^ signBit
		e.seq = int64(binary.BigEndian.Uint64(q[36:]))
		if e.key.part < 0 {
			return vcErr(p+16, "negative partition")
		}
		if e.seq < 0 {
			return vcErr(p+36, "negative sequence")
		}
		if i > 0 && seqs[i-1].compare(e) >= 0 {
			return vcErr(p, "sequence entries not strictly ascending")
		}
		p += vcSeqEntrySize
	}
	c.seqs = seqs
	return nil
}

// AppendSender appends the 16-byte vc-sender value for id.
func AppendSender(dst []byte, id SenderID) []byte { return append(dst, id[:]...) }

// DecodeSender decodes a vc-sender value: exactly 16 bytes.
func DecodeSender(b []byte) (SenderID, error) {
	if len(b) != 16 {
		return SenderID{}, &DecodeError{Header: HeaderVCSender, Offset: min(len(b), 16), Reason: "want 16 bytes, have " + itoa(int64(len(b)))}
	}
	return SenderID(b), nil
}

// AppendSeq appends the 8-byte big-endian vc-seq value for seq.
func AppendSeq(dst []byte, seq int64) []byte { return binary.BigEndian.AppendUint64(dst, uint64(seq)) }

// DecodeSeq decodes a vc-seq value: exactly 8 bytes holding a non-negative
// big-endian integer.
func DecodeSeq(b []byte) (int64, error) {
	if len(b) != 8 {
		return 0, &DecodeError{Header: HeaderVCSeq, Offset: min(len(b), 8), Reason: "want 8 bytes, have " + itoa(int64(len(b)))}
	}
	v := binary.BigEndian.Uint64(b)
	if v > math.MaxInt64 {
		return 0, &DecodeError{Header: HeaderVCSeq, Offset: 0, Reason: "negative sequence"}
	}
	return int64(v), nil
}
