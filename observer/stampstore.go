package observer

// How the store keeps a record's stamp.
//
// A decodable stamp is stored in a compact form of its own rather than as
// the headers it arrived in: a 16-entry vc header is about 500 bytes, most
// of them the same topic ID written once per entry, and writing those bytes
// (to the WAL, then to the database) was a third of the cost of ingest. The
// compact form names each topic once and writes partitions, offsets and
// sequences as varints, about a fifth of the size. It decodes to the same
// stamp; Record.Headers re-encodes it in the dialect it arrived in. An
// undecodable stamp is kept verbatim (encodeStampHeaders), since there is
// no stamp to re-encode. The two forms are told apart by their first byte:
// the verbatim form starts with the length of a header name, never 0.

import (
	"cmp"
	"encoding/binary"
	"fmt"

	"github.com/parsley-go/parsley/headers"
)

const (
	compactMark    = 0x00 // first byte of the compact form
	compactVersion = 0x01

	compactVC     = 1 << 0 // the record carried a vc header
	compactCauses = 1 << 1 // the record carried a parsley.causes header
	compactTagged = 1 << 2 // and vc-sender / vc-seq
)

// compactBuf is scratch for appendCompactStamp: the topics and senders
// named so far in one stamp.
type compactBuf struct {
	topics  []headers.TopicID
	senders []headers.SenderID
}

func (b *compactBuf) topic(id headers.TopicID) uint64 {
	for i, t := range b.topics {
		if t == id {
			return uint64(i)
		}
	}
	b.topics = append(b.topics, id)
	return uint64(len(b.topics) - 1)
}

func (b *compactBuf) sender(id headers.SenderID) uint64 {
	for i, s := range b.senders {
		if s == id {
			return uint64(i)
		}
	}
	b.senders = append(b.senders, id)
	return uint64(len(b.senders) - 1)
}

// appendCompactStamp appends st, whose entries offs and seqs are, in the compact form: the mark, the version,
// the flags; the sender and sequence when tagged; the topic IDs the entries
// name, each once; the offset entries as (topic index, partition, offset);
// the senders the sequence entries name, each once; the sequence entries as
// (topic index, partition, sender index, sequence). It reports false, and
// appends nothing, for a stamp with a negative number in it, which only the
// verbatim form keeps.
func (b *compactBuf) appendCompactStamp(dst []byte, st *headers.Stamp, offs []headers.OffsetEntry, seqs []headers.SeqEntry, flags byte) ([]byte, bool) {
	if st.Tagged && st.Seq < 0 {
		return dst, false
	}
	b.topics, b.senders = b.topics[:0], b.senders[:0]
	for _, e := range offs {
		if e.Channel.Partition < 0 || e.Offset < 0 {
			return dst, false
		}
		b.topic(e.Channel.Topic)
	}
	for _, e := range seqs {
		if e.Channel.Partition < 0 || e.Seq < 0 {
			return dst, false
		}
		b.topic(e.Channel.Topic)
		b.sender(e.Sender)
	}
	if st.Tagged {
		flags |= compactTagged
	}
	dst = append(dst, compactMark, compactVersion, flags)
	if st.Tagged {
		dst = append(dst, st.Sender[:]...)
		dst = binary.AppendUvarint(dst, uint64(st.Seq))
	}
	dst = binary.AppendUvarint(dst, uint64(len(b.topics)))
	for _, t := range b.topics {
		dst = append(dst, t[:]...)
	}
	dst = binary.AppendUvarint(dst, uint64(len(offs)))
	for _, e := range offs {
		dst = binary.AppendUvarint(dst, b.topic(e.Channel.Topic))
		dst = binary.AppendUvarint(dst, uint64(e.Channel.Partition))
		dst = binary.AppendUvarint(dst, uint64(e.Offset))
	}
	dst = binary.AppendUvarint(dst, uint64(len(b.senders)))
	for _, s := range b.senders {
		dst = append(dst, s[:]...)
	}
	dst = binary.AppendUvarint(dst, uint64(len(seqs)))
	for _, e := range seqs {
		dst = binary.AppendUvarint(dst, b.topic(e.Channel.Topic))
		dst = binary.AppendUvarint(dst, uint64(e.Channel.Partition))
		dst = binary.AppendUvarint(dst, b.sender(e.Sender))
		dst = binary.AppendUvarint(dst, uint64(e.Seq))
	}
	return dst, true
}

// compactReader reads the compact form, failing on the first malformed
// field.
type compactReader struct {
	b   []byte
	err error
}

func (r *compactReader) uvarint(max uint64) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 || v > max {
		r.err = errCorruptStore
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *compactReader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errCorruptStore
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *compactReader) id() (id [16]byte) {
	if r.err != nil {
		return id
	}
	if len(r.b) < 16 {
		r.err = errCorruptStore
		return id
	}
	copy(id[:], r.b)
	r.b = r.b[16:]
	return id
}

const (
	maxPartition = 1<<31 - 1
	maxPosition  = 1<<63 - 1
)

// readCompactStamp decodes the compact form b into st and returns its
// flags.
func readCompactStamp(st *headers.Stamp, b []byte) (byte, error) {
	st.Reset()
	if len(b) < 3 || b[0] != compactMark || b[1] != compactVersion {
		return 0, errCorruptStore
	}
	flags := b[2]
	r := compactReader{b: b[3:]}
	if flags&compactTagged != 0 {
		st.Tagged = true
		st.Sender = r.id()
		st.Seq = int64(r.uvarint(maxPosition))
	}
	// Every entry takes at least a byte per field, so no count can exceed
	// what is left: the bound keeps a corrupt count from allocating.
	topics := make([]headers.TopicID, r.uvarint(uint64(len(r.b)/16)))
	for i := range topics {
		topics[i] = r.id()
	}
	for range r.uvarint(uint64(len(r.b) / 3)) {
		t := r.uvarint(uint64(len(topics) - 1))
		p := r.uvarint(maxPartition)
		o := r.uvarint(maxPosition)
		if r.err != nil || len(topics) == 0 {
			return 0, errCorruptStore
		}
		st.Clock.SetOffset(headers.Channel{Topic: topics[t], Partition: int32(p)}, int64(o))
	}
	senders := make([]headers.SenderID, r.uvarint(uint64(len(r.b)/16)))
	for i := range senders {
		senders[i] = r.id()
	}
	for range r.uvarint(uint64(len(r.b) / 4)) {
		t := r.uvarint(uint64(len(topics) - 1))
		p := r.uvarint(maxPartition)
		s := r.uvarint(uint64(len(senders) - 1))
		q := r.uvarint(maxPosition)
		if r.err != nil || len(topics) == 0 || len(senders) == 0 {
			return 0, errCorruptStore
		}
		st.Clock.SetSeq(headers.Channel{Topic: topics[t], Partition: int32(p)}, senders[s], int64(q))
	}
	if r.err != nil || len(r.b) != 0 {
		st.Reset()
		return 0, errCorruptStore
	}
	return flags, nil
}

// readStoredStamp decodes a stored stamp in either form into st.
func readStoredStamp(st *headers.Stamp, b []byte) error {
	if len(b) > 0 && b[0] == compactMark {
		_, err := readCompactStamp(st, b)
		return err
	}
	hs, err := decodeStampHeaders(b)
	if err != nil {
		return err
	}
	return headers.ReadStamp(st, hs)
}

// storedHeaders returns the stamp headers of a stored stamp: verbatim for
// the verbatim form, re-encoded in the dialects it arrived in for the
// compact form, and st decoded from them (nil for an undecodable stamp).
func storedHeaders(b []byte) ([]headers.Header, *headers.Stamp, error) {
	if len(b) == 0 || b[0] != compactMark {
		hs, err := decodeStampHeaders(b)
		if err != nil {
			return nil, nil, err
		}
		return hs, nil, nil
	}
	st := new(headers.Stamp)
	flags, err := readCompactStamp(st, b)
	if err != nil {
		return nil, nil, err
	}
	var hs []headers.Header
	if flags&(compactVC|compactTagged) != 0 {
		if hs, err = headers.AppendStamp(hs, st, headers.DialectVC); err != nil {
			return nil, nil, fmt.Errorf("observer: re-encode a stored stamp: %w", err)
		}
	}
	if flags&compactCauses != 0 {
		offsets := headers.Stamp{}
		for e := range st.Clock.OffsetEntries() {
			offsets.Clock.SetOffset(e.Channel, e.Offset)
		}
		// AppendStamp refuses to add to headers holding a stamp already.
		c, err := headers.AppendStamp([]headers.Header(nil), &offsets, headers.DialectCauses)
		if err != nil {
			return nil, nil, fmt.Errorf("observer: re-encode a stored stamp: %w", err)
		}
		hs = append(hs, c...)
	}
	return hs, st, nil
}

// chanOrder orders channels as a clock keeps its entries: topic IDs as
// two signed 64-bit halves (Java's UUID order), then partitions.
// TestChanOrderIsClockOrder holds it to the clock's.
func chanOrder(a, b headers.Channel) int {
	if c := idOrder(a.Topic, b.Topic); c != 0 {
		return c
	}
	return cmp.Compare(a.Partition, b.Partition)
}

// seqOrder orders sequence entries as a clock keeps them: by channel,
// then sender, each in Java's UUID order.
func seqOrder(a, b headers.SeqEntry) int {
	if c := chanOrder(a.Channel, b.Channel); c != 0 {
		return c
	}
	return idOrder(a.Sender, b.Sender)
}

func idOrder(a, b [16]byte) int {
	if c := cmp.Compare(int64(binary.BigEndian.Uint64(a[:8])), int64(binary.BigEndian.Uint64(b[:8]))); c != 0 {
		return c
	}
	return cmp.Compare(int64(binary.BigEndian.Uint64(a[8:])), int64(binary.BigEndian.Uint64(b[8:])))
}
