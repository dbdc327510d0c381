package protocol

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"github.com/parsley-go/parsley/headers"
)

// Store layout, format version 2. Keys are ASCII strings:
//
//	v                          uint32 format version (2; a version 1 store, which
//	                           has 8-byte frontiers and no ack/ keys, upgrades)
//	scope                      uint32 inputCount, per input: topic(16) int32 partition;
//	                           uint32 sinkCount, per sink: topic(16)
//	ca                         vc clock: carried ancestry
//	f/<ch>                     int64 frontier, int64 claim: the highest offset at or
//	                           below the frontier known to hold a committed record
//	                           (-1 none); an 8-byte value (an older build) is a
//	                           frontier whose claim is the frontier itself
//	cc/<ch>                    vc clock: the channel's advertised clock
//	q/<ch>/m                   int64 headIndex, int64 tailIndex (one past the last entry)
//	q/<ch>/e/<16 hex digits>   held record (see appendHeld), by queue index
//	sq/<ch>                    int64 last send sequence issued to sink channel ch
//	ds/<ch>/<sender>           int64 seq, int64 offset: highest delivered send
//	                           sequence from sender on ch, and its offset; kept
//	                           when ch leaves the inputs
//	ack/<ch>                   int64 highest acknowledged offset of this node's
//	                           committed sends to sink channel ch
//
// <ch> is the topic ID in canonical UUID text, a colon, and the partition as
// ten decimal digits (zero-padded), so keys of one topic sort by partition.
// <sender> is the sender ID in canonical UUID text. All integers are
// big-endian; clocks use the vc dialect's layout (headers.AppendVC).
const (
	formatVersion  = 2
	formatVersion1 = 1 // read and upgraded
)

const (
	keyVersion = "v"
	keyScope   = "scope"
	keyCarried = "ca"
	pfxFront   = "f/"
	pfxCC      = "cc/"
	pfxQueue   = "q/"
	pfxSeq     = "sq/"
	pfxDS      = "ds/"
	pfxAcked   = "ack/"
)

// chanKey returns the text form of ch used inside store keys.
func chanKey(ch headers.Channel) string {
	var b [36 + 1 + 10]byte
	copy(b[:], ch.Topic.String())
	b[36] = ':'
	p := strconv.AppendUint(nil, uint64(uint32(ch.Partition)), 10)
	for i := range 10 {
		b[37+i] = '0'
	}
	copy(b[47-len(p):], p)
	return string(b[:])
}

// parseChanKey reverses chanKey.
func parseChanKey(s string) (headers.Channel, bool) {
	if len(s) != 47 || s[36] != ':' {
		return headers.Channel{}, false
	}
	t, err := headers.ParseTopicID(s[:36])
	if err != nil {
		return headers.Channel{}, false
	}
	p, err := strconv.ParseUint(s[37:], 10, 31)
	if err != nil {
		return headers.Channel{}, false
	}
	return headers.Channel{Topic: t, Partition: int32(p)}, true
}

func entryKey(ck string, idx int64) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 0, len(pfxQueue)+len(ck)+3+16)
	b = append(b, pfxQueue...)
	b = append(b, ck...)
	b = append(b, "/e/"...)
	for shift := 60; shift >= 0; shift -= 4 {
		b = append(b, digits[uint64(idx)>>uint(shift)&0xf])
	}
	return string(b)
}

func metaKey(ck string) string { return pfxQueue + ck + "/m" }

func dsKey(ck string, s headers.SenderID) string { return pfxDS + ck + "/" + s.String() }

func appendInt64(b []byte, v int64) []byte { return binary.BigEndian.AppendUint64(b, uint64(v)) }

func decodeInt64(b []byte) (int64, bool) {
	if len(b) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b)), true
}

// appendFrontier encodes an input's frontier and claim.
func appendFrontier(b []byte, frontier, claim int64) []byte {
	return appendInt64(appendInt64(b, frontier), claim)
}

// decodeFrontier decodes a frontier value: 16 bytes (frontier, claim) with
// -1 ≤ claim ≤ frontier, or the 8-byte frontier of an older build, whose
// stamps claimed the frontier itself.
func decodeFrontier(b []byte) (frontier, claim int64, ok bool) {
	if f, ok := decodeInt64(b); ok {
		return f, f, f >= -1
	}
	f, c, ok := decodePair(b)
	return f, c, ok && f >= -1 && c >= -1 && c <= f
}

func decodePair(b []byte) (int64, int64, bool) {
	if len(b) != 16 {
		return 0, 0, false
	}
	return int64(binary.BigEndian.Uint64(b)), int64(binary.BigEndian.Uint64(b[8:])), true
}

// scope is the declared inputs and sinks the state was written under.
type scope struct {
	inputs []headers.Channel
	sinks  []headers.TopicID
}

func encodeScope(s scope) []byte {
	b := make([]byte, 0, 8+len(s.inputs)*20+len(s.sinks)*16)
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.inputs)))
	for _, ch := range s.inputs {
		b = append(b, ch.Topic[:]...)
		b = binary.BigEndian.AppendUint32(b, uint32(ch.Partition))
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.sinks)))
	for _, t := range s.sinks {
		b = append(b, t[:]...)
	}
	return b
}

func decodeScope(b []byte) (scope, error) {
	var s scope
	if len(b) < 4 {
		return s, fmt.Errorf("truncated input count")
	}
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	if uint64(n)*20 > uint64(len(b)) {
		return s, fmt.Errorf("input count %d exceeds the value", n)
	}
	for range n {
		ch := headers.Channel{Topic: headers.TopicID(b[:16]), Partition: int32(binary.BigEndian.Uint32(b[16:]))}
		if ch.Partition < 0 {
			return s, fmt.Errorf("negative partition")
		}
		s.inputs = append(s.inputs, ch)
		b = b[20:]
	}
	if len(b) < 4 {
		return s, fmt.Errorf("truncated sink count")
	}
	m := binary.BigEndian.Uint32(b)
	b = b[4:]
	if uint64(m)*16 != uint64(len(b)) {
		return s, fmt.Errorf("sink count %d does not match the %d bytes left", m, len(b))
	}
	for range m {
		s.sinks = append(s.sinks, headers.TopicID(b[:16]))
		b = b[16:]
	}
	return s, nil
}

// A held record is stored verbatim:
//
//	int64 offset
//	int64 timestamp
//	int32 keyLength   (-1 = nil key), key bytes
//	int32 valueLength (-1 = nil value), value bytes
//	int32 headerCount (-1 = nil header slice), then per header:
//	  int32 nameLength, name bytes
//	  int32 valueLength (-1 = nil value), value bytes
//
// Every header is kept, the stamp headers included, so the record's stamp is
// decoded from exactly the bytes that were fetched, and a delivery after a
// restart is identical to one before it.
func heldSize(r *Record) int {
	n := 8 + 8 + 4 + len(r.Key) + 4 + len(r.Value) + 4
	for _, h := range r.Headers {
		n += 4 + len(h.Key) + 4 + len(h.Value)
	}
	return n
}

func appendBytes(b, v []byte) []byte {
	if v == nil {
		return binary.BigEndian.AppendUint32(b, math.MaxUint32)
	}
	b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
	return append(b, v...)
}

func appendHeld(b []byte, r *Record) []byte {
	b = appendInt64(b, r.Offset)
	b = appendInt64(b, r.Timestamp)
	b = appendBytes(b, r.Key)
	b = appendBytes(b, r.Value)
	if r.Headers == nil {
		b = binary.BigEndian.AppendUint32(b, math.MaxUint32)
	} else {
		b = binary.BigEndian.AppendUint32(b, uint32(len(r.Headers)))
		for _, h := range r.Headers {
			b = binary.BigEndian.AppendUint32(b, uint32(len(h.Key)))
			b = append(b, h.Key...)
			b = appendBytes(b, h.Value)
		}
	}
	return b
}

type reader struct {
	b   []byte
	p   int
	err string
}

func (r *reader) int64() int64 {
	if r.err != "" {
		return 0
	}
	if len(r.b)-r.p < 8 {
		r.err = "truncated at byte " + strconv.Itoa(r.p)
		return 0
	}
	v := int64(binary.BigEndian.Uint64(r.b[r.p:]))
	r.p += 8
	return v
}

// length reads an int32 length; nilOK allows -1.
func (r *reader) length(nilOK bool) int {
	if r.err != "" {
		return 0
	}
	if len(r.b)-r.p < 4 {
		r.err = "truncated at byte " + strconv.Itoa(r.p)
		return 0
	}
	n := int32(binary.BigEndian.Uint32(r.b[r.p:]))
	if n == -1 && nilOK {
		r.p += 4
		return -1
	}
	if n < 0 || int(n) > len(r.b)-r.p-4 {
		r.err = "bad length " + strconv.Itoa(int(n)) + " at byte " + strconv.Itoa(r.p)
		return 0
	}
	r.p += 4
	return int(n)
}

// bytes reads a length-prefixed byte string; the result aliases the input
// and has its capacity clipped, so appending to it cannot clobber the rest.
func (r *reader) bytes() []byte {
	n := r.length(true)
	if r.err != "" || n < 0 {
		return nil
	}
	v := r.b[r.p : r.p+n : r.p+n]
	r.p += n
	return v
}

// decodeHeld decodes a held record into rec (Channel is left as is). The
// byte slices alias b.
func decodeHeld(rec *Record, b []byte) error {
	r := reader{b: b}
	rec.Offset = r.int64()
	rec.Timestamp = r.int64()
	rec.Key = r.bytes()
	rec.Value = r.bytes()
	n := r.length(true)
	rec.Headers = nil
	if r.err == "" && n >= 0 {
		// Each header needs at least 8 bytes, so a hostile count cannot
		// force a large allocation.
		if n > (len(b)-r.p)/8 {
			return fmt.Errorf("header count %d exceeds the value", n)
		}
		rec.Headers = make([]headers.Header, n)
		for i := range rec.Headers {
			k := r.length(false)
			if r.err != "" {
				break
			}
			rec.Headers[i].Key = headerName(r.b[r.p : r.p+k])
			r.p += k
			rec.Headers[i].Value = r.bytes()
		}
	}
	if r.err != "" {
		return fmt.Errorf("%s", r.err)
	}
	if r.p != len(b) {
		return fmt.Errorf("%d trailing bytes", len(b)-r.p)
	}
	if rec.Offset < 0 {
		return fmt.Errorf("negative offset")
	}
	return nil
}

// headerName returns b as a string, without allocating for the stamp
// headers every stamped record carries.
func headerName(b []byte) string {
	switch string(b) {
	case headers.HeaderVC:
		return headers.HeaderVC
	case headers.HeaderVCSender:
		return headers.HeaderVCSender
	case headers.HeaderVCSeq:
		return headers.HeaderVCSeq
	case headers.HeaderCauses:
		return headers.HeaderCauses
	}
	return string(b)
}
