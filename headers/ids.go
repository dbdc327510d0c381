package headers

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
)

// TopicID is a Kafka topic ID: 16 bytes, most significant first. A topic
// deleted and recreated under the same name gets a new ID, so the ID — not the
// name — identifies a channel. The zero ID is reserved by Kafka and never names
// a real topic.
type TopicID [16]byte

// SenderID is the stable identity of a stamping node, carried in the
// vc-sender header: 16 bytes, most significant first.
type SenderID [16]byte

// String returns the canonical UUID text form, e.g.
// "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0".
func (t TopicID) String() string { return uuidString(t) }

// IsZero reports whether t is the reserved all-zero ID.
func (t TopicID) IsZero() bool { return t == TopicID{} }

// Compare orders topic IDs as the Java library does (java.util.UUID's
// compareTo): the most significant 8 bytes as a signed 64-bit integer, then
// the least significant 8 bytes likewise. This is the order of a Clock's
// entries and of the vc dialect. The causes dialect sorts by unsigned byte
// order instead (see CompareBytes).
func (t TopicID) Compare(o TopicID) int {
	if t == o {
		return 0 // one 16-byte compare: a search over one topic's partitions meets it at every step
	}
	th, oh := binary.BigEndian.Uint64(t[:8])^signBit, binary.BigEndian.Uint64(o[:8])^signBit
	if th != oh {
		return cmpU64(th, oh)
	}
	return cmpU64(binary.BigEndian.Uint64(t[8:])^signBit, binary.BigEndian.Uint64(o[8:])^signBit)
}

// CompareBytes orders topic IDs by the unsigned lexicographic order of their
// 16 bytes: the order of groups in the causes dialect.
func (t TopicID) CompareBytes(o TopicID) int { return bytes.Compare(t[:], o[:]) }

// String returns the canonical UUID text form.
func (s SenderID) String() string { return uuidString(s) }

// IsZero reports whether s is the all-zero ID.
func (s SenderID) IsZero() bool { return s == SenderID{} }

// Compare orders sender IDs as java.util.UUID's compareTo does: most, then
// least significant halves as signed 64-bit integers. The vc dialect sorts
// sequence entries by channel, then sender, in this order.
func (s SenderID) Compare(o SenderID) int {
	a, b := senderKeyOf(s), senderKeyOf(o)
	return compareHalves(a.hi, a.lo, b.hi, b.lo)
}

// ParseTopicID parses the canonical UUID text form (36 characters, hyphens
// after the 8th, 12th, 16th and 20th hex digits, either case).
func ParseTopicID(s string) (TopicID, error) {
	var id TopicID
	if err := parseUUID(id[:], s); err != nil {
		return TopicID{}, fmt.Errorf("headers: parse topic ID %q: %w", s, err)
	}
	return id, nil
}

// ParseSenderID parses the canonical UUID text form of a sender ID.
func ParseSenderID(s string) (SenderID, error) {
	var id SenderID
	if err := parseUUID(id[:], s); err != nil {
		return SenderID{}, fmt.Errorf("headers: parse sender ID %q: %w", s, err)
	}
	return id, nil
}

// ErrInvalidID is wrapped by the errors ParseTopicID and ParseSenderID return.
var ErrInvalidID = errors.New("invalid UUID text")

func uuidString(b [16]byte) string {
	var buf [36]byte
	hex.Encode(buf[0:8], b[0:4])
	buf[8] = '-'
	hex.Encode(buf[9:13], b[4:6])
	buf[13] = '-'
	hex.Encode(buf[14:18], b[6:8])
	buf[18] = '-'
	hex.Encode(buf[19:23], b[8:10])
	buf[23] = '-'
	hex.Encode(buf[24:36], b[10:16])
	return string(buf[:])
}

func parseUUID(dst []byte, s string) error {
	if len(s) != 36 || s[8] != '-' || s[13] != '-' || s[18] != '-' || s[23] != '-' {
		return ErrInvalidID
	}
	j := 0
	for i := 0; i < 36; {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			i++
			continue
		}
		hi, ok1 := unhex(s[i])
		lo, ok2 := unhex(s[i+1])
		if !ok1 || !ok2 {
			return ErrInvalidID
		}
		dst[j] = hi<<4 | lo
		j++
		i += 2
	}
	return nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// Channel is one partition of one topic incarnation: the unit a clock's
// offset entries and a node's hold queues are kept per.
type Channel struct {
	Topic     TopicID
	Partition int32
}

// Compare orders channels by topic ID (TopicID.Compare), then partition: the
// order of a Clock's entries and of the vc dialect, matching the Java
// library byte for byte.
func (c Channel) Compare(o Channel) int {
	if r := c.Topic.Compare(o.Topic); r != 0 {
		return r
	}
	return cmp.Compare(c.Partition, o.Partition)
}

// String returns "topicID/partition".
func (c Channel) String() string {
	return c.Topic.String() + "/" + strconv.FormatInt(int64(c.Partition), 10)
}

// Coordinate names one record: a channel and an offset on it.
type Coordinate struct {
	Channel
	Offset int64
}

// String returns "topicID/partition@offset".
func (c Coordinate) String() string {
	return c.Channel.String() + "@" + strconv.FormatInt(c.Offset, 10)
}
