package headers

import (
	"encoding/binary"
	"math"
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
	for _, e := range c.offsets {
		if e.Channel.Partition < 0 || e.Offset < 0 {
			return dst, &EncodeError{Dialect: HeaderVC, Reason: "negative partition or offset on channel " + e.Channel.String()}
		}
	}
	for _, e := range c.seqs {
		if e.Channel.Partition < 0 || e.Seq < 0 {
			return dst, &EncodeError{Dialect: HeaderVC, Reason: "negative partition or sequence on channel " + e.Channel.String()}
		}
	}
	dst = append(dst, VCVersion)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(c.offsets)))
	for _, e := range c.offsets {
		dst = append(dst, e.Channel.Topic[:]...)
		dst = binary.BigEndian.AppendUint32(dst, uint32(e.Channel.Partition))
		dst = binary.BigEndian.AppendUint64(dst, uint64(e.Offset))
	}
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(c.seqs)))
	for _, e := range c.seqs {
		dst = append(dst, e.Channel.Topic[:]...)
		dst = binary.BigEndian.AppendUint32(dst, uint32(e.Channel.Partition))
		dst = append(dst, e.Sender[:]...)
		dst = binary.BigEndian.AppendUint64(dst, uint64(e.Seq))
	}
	return dst, nil
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
		c.offsets = make([]OffsetEntry, 0, n)
	}
	for i := 0; i < int(n); i++ {
		var e OffsetEntry
		copy(e.Channel.Topic[:], b[p:p+16])
		e.Channel.Partition = int32(binary.BigEndian.Uint32(b[p+16:]))
		e.Offset = int64(binary.BigEndian.Uint64(b[p+20:]))
		if e.Channel.Partition < 0 {
			return vcErr(p+16, "negative partition")
		}
		if e.Offset < 0 {
			return vcErr(p+20, "negative offset")
		}
		if i > 0 && c.offsets[i-1].Channel.Compare(e.Channel) >= 0 {
			return vcErr(p, "offset entries not strictly ascending")
		}
		c.offsets = append(c.offsets, e)
		p += vcOffsetEntrySize
	}
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
		c.seqs = make([]SeqEntry, 0, m)
	}
	for i := 0; i < int(m); i++ {
		var e SeqEntry
		copy(e.Channel.Topic[:], b[p:p+16])
		e.Channel.Partition = int32(binary.BigEndian.Uint32(b[p+16:]))
		copy(e.Sender[:], b[p+20:p+36])
		e.Seq = int64(binary.BigEndian.Uint64(b[p+36:]))
		if e.Channel.Partition < 0 {
			return vcErr(p+16, "negative partition")
		}
		if e.Seq < 0 {
			return vcErr(p+36, "negative sequence")
		}
		if i > 0 && compareSeqKey(c.seqs[i-1], e.Channel, e.Sender) >= 0 {
			return vcErr(p, "sequence entries not strictly ascending")
		}
		c.seqs = append(c.seqs, e)
		p += vcSeqEntrySize
	}
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
