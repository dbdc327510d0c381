package observer

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/parsley-go/parsley/headers"
)

// ErrBadCoordinate is wrapped by every error ParseRef returns.
var ErrBadCoordinate = errors.New("malformed coordinate")

// Ref names a record as an operator types it: a topic (by name or by topic
// ID in UUID form), a partition and an offset, written
// "TOPIC/PARTITION@OFFSET", e.g. "orders/3@1207" or
// "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0/3@1207".
type Ref struct {
	Topic     string          // the topic as written: a name, or the UUID text when ByID
	ByID      bool            // Topic is a topic ID
	ID        headers.TopicID // set when ByID
	Partition int32
	Offset    int64
}

// String returns the reference in "TOPIC/PARTITION@OFFSET" form.
func (r Ref) String() string {
	return r.Topic + "/" + strconv.FormatInt(int64(r.Partition), 10) + "@" + strconv.FormatInt(r.Offset, 10)
}

// RefOf returns the reference of a coordinate, by topic ID.
func RefOf(c headers.Coordinate) Ref {
	return Ref{Topic: c.Topic.String(), ByID: true, ID: c.Topic, Partition: c.Partition, Offset: c.Offset}
}

// ParseRef parses "TOPIC/PARTITION@OFFSET". TOPIC is a Kafka topic name
// (1–249 characters of [a-zA-Z0-9._-]) or a topic ID in UUID form;
// PARTITION and OFFSET are non-negative decimal integers without sign or
// leading zeros. Any other input is an error wrapping ErrBadCoordinate
// that quotes it.
func ParseRef(s string) (Ref, error) {
	bad := func(why string) (Ref, error) {
		return Ref{}, fmt.Errorf("observer: coordinate %q: %s (want TOPIC/PARTITION@OFFSET): %w", s, why, ErrBadCoordinate)
	}
	at := strings.LastIndexByte(s, '@')
	if at < 0 {
		return bad("no '@'")
	}
	slash := strings.LastIndexByte(s[:at], '/')
	if slash < 0 {
		return bad("no '/' before '@'")
	}
	topic, part, off := s[:slash], s[slash+1:at], s[at+1:]
	if topic == "" || len(topic) > 249 {
		return bad("topic name must have 1 to 249 characters")
	}
	for i := 0; i < len(topic); i++ {
		c := topic[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return bad(fmt.Sprintf("topic has invalid character %q", c))
		}
	}
	if topic == "." || topic == ".." {
		return bad("topic may not be '.' or '..'")
	}
	p, err := parseNonNeg(part, 31)
	if err != nil {
		return bad("partition " + err.Error())
	}
	o, err := parseNonNeg(off, 63)
	if err != nil {
		return bad("offset " + err.Error())
	}
	r := Ref{Topic: topic, Partition: int32(p), Offset: o}
	if id, err := headers.ParseTopicID(topic); err == nil {
		r.ByID, r.ID = true, id
		if id.IsZero() {
			return bad("the zero topic ID names no topic")
		}
	}
	return r, nil
}

func parseNonNeg(s string, bits int) (int64, error) {
	if s == "" {
		return 0, errors.New("is empty")
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, errors.New("has a leading zero")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, errors.New("is not a non-negative decimal integer")
		}
	}
	v, err := strconv.ParseInt(s, 10, bits+1)
	if err != nil {
		return 0, errors.New("is out of range")
	}
	return v, nil
}
