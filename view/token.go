package view

// Causal tokens: a writer's causal past, carried to a read.

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
)

// ErrBadToken: a token's text form does not parse. The *TokenError that
// wraps it says where and why.
var ErrBadToken = errors.New("view: invalid causal token")

// MaxTokenText bounds the text form ParseToken accepts: 64 KiB holds about
// 1,700 channels, far more than a writer's causal past names, and keeps a
// hostile header from costing more than that to reject.
const MaxTokenText = 64 << 10

// tokenPrefix names the token format: version 1 is the vc dialect's clock
// layout (headers.AppendVC) in unpadded URL-safe base64.
const tokenPrefix = "pt1."

// A Token is a writer's causal past: the records it has seen or written,
// as a dependency clock of the same kind package clock stamps with (channel
// offsets, and send sequences not yet resolved to offsets). A read with a
// token (View.GetAfter) waits until the state reflects every record the
// token names on a channel the stage consumes.
//
// The zero Token is empty: it names nothing, and a read with it waits for
// nothing. A Token is immutable and safe for concurrent use.
type Token struct {
	clk *headers.Clock // nil for the empty token; never modified
}

// TokenOf returns the token of a dependency clock, such as
// (*clock.Clock).Snapshot after the writer folded its acknowledged send
// with RecordProduced. It copies c.
func TokenOf(c *headers.Clock) Token {
	if c == nil || c.IsEmpty() {
		return Token{}
	}
	return Token{clk: c.Clone()}
}

// TokenAt returns the token of one record: it names every record at or
// below at.Offset on at's channel, so a read with it waits until the owning
// task delivered that record (if it consumes the channel). A channel is
// named by topic ID, not name: a stage handler has the coordinate of the
// message it was given (stage.Message.Coordinate); a franz-go consumer
// finds the ID in its fetch (kgo.FetchTopic.TopicID); otherwise TokenFor
// looks it up.
func TokenAt(at headers.Coordinate) Token {
	c := new(headers.Clock)
	c.SetOffset(at.Channel, at.Offset)
	return Token{clk: c}
}

// TokenFor is TokenAt for a record known by topic name, partition and
// offset: it resolves the topic's current ID through r (a clock's
// Resolver, clk.Resolver(), or clock.NewResolver over an admin client). An
// unknown topic is a *clock.UnknownTopicError; a negative partition or
// offset is an error wrapping clock.ErrInvalidCoordinate.
func TokenFor(ctx context.Context, r *clock.Resolver, topic string, partition int32, offset int64) (Token, error) {
	id, err := r.TopicID(ctx, topic)
	if err != nil {
		return Token{}, err
	}
	if partition < 0 || offset < 0 {
		return Token{}, fmt.Errorf("view: token for %q/%d@%d: %w", topic, partition, offset, clock.ErrInvalidCoordinate)
	}
	return TokenAt(headers.Coordinate{Channel: headers.Channel{Topic: id, Partition: partition}, Offset: offset}), nil
}

// Clock returns a copy of the token's clock.
func (t Token) Clock() *headers.Clock {
	if t.clk == nil {
		return new(headers.Clock)
	}
	return t.clk.Clone()
}

// IsEmpty reports whether the token names no record.
func (t Token) IsEmpty() bool { return t.clk == nil || t.clk.IsEmpty() }

// Merge returns a token naming everything t or o names: the causal past of
// a reader that saw both.
func (t Token) Merge(o Token) Token {
	switch {
	case o.IsEmpty():
		return t
	case t.IsEmpty():
		return o
	}
	c := t.clk.Clone()
	c.Merge(o.clk)
	return Token{clk: c}
}

// String returns the token's compact text form, for an HTTP header or a
// cookie: "pt1." and the clock's vc layout in unpadded URL-safe base64
// (about 38 characters per channel). Equal tokens have equal text, and
// ParseToken(t.String()) equals t.
func (t Token) String() string {
	c := t.clk
	if c == nil {
		c = new(headers.Clock)
	}
	b, err := headers.EncodeVC(c)
	if err != nil {
		// A clock decoded or built through headers' setters always
		// encodes; this would be a bug in headers.
		panic("view: token does not encode: " + err.Error())
	}
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// MarshalText implements encoding.TextMarshaler with String's form.
func (t Token) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler with ParseToken.
func (t *Token) UnmarshalText(b []byte) error {
	p, err := ParseToken(string(b))
	if err != nil {
		return err
	}
	*t = p
	return nil
}

// TokenError says why a token's text form was refused. It wraps
// ErrBadToken and, for a clock that does not decode, the headers package's
// *headers.DecodeError.
type TokenError struct {
	// Text is the refused text, cut to its first 64 bytes.
	Text   string
	Reason string
	Err    error // the underlying decode error, if any
}

func (e *TokenError) Error() string {
	s := "view: invalid causal token " + strconv.Quote(e.Text) + ": " + e.Reason
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns ErrBadToken and the underlying error.
func (e *TokenError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrBadToken}
	}
	return []error{ErrBadToken, e.Err}
}

var strictB64 = base64.RawURLEncoding.Strict()

// ParseToken parses a token's text form, strictly: exactly String's form
// of some token, nothing else — the "pt1." prefix, canonical unpadded
// URL-safe base64 without whitespace, and a vc clock whose entries are
// sorted, unique and non-negative. Anything else is a *TokenError wrapping
// ErrBadToken. The empty string is refused too: a reader without a token
// reads with View.Get.
func ParseToken(s string) (Token, error) {
	bad := func(reason string, err error) (Token, error) {
		text := s
		if len(text) > 64 {
			text = text[:64]
		}
		return Token{}, &TokenError{Text: text, Reason: reason, Err: err}
	}
	switch {
	case s == "":
		return bad("empty", nil)
	case len(s) > MaxTokenText:
		return bad(fmt.Sprintf("%d bytes, more than the %d accepted", len(s), MaxTokenText), nil)
	case len(s) < len(tokenPrefix) || s[:len(tokenPrefix)] != tokenPrefix:
		return bad("does not start with "+strconv.Quote(tokenPrefix), nil)
	}
	b, err := strictB64.DecodeString(s[len(tokenPrefix):])
	if err != nil {
		return bad("not unpadded URL-safe base64", err)
	}
	c, err := headers.DecodeVC(b)
	if err != nil {
		return bad("clock does not decode", err)
	}
	// The zero topic ID names no topic: no task consumes it, so a token
	// naming it could only ever be a forgery or a bug.
	for e := range c.OffsetEntries() {
		if e.Channel.Topic.IsZero() {
			return bad(fmt.Sprintf("offset entry on the zero topic ID (partition %d)", e.Channel.Partition), nil)
		}
	}
	for e := range c.SeqEntries() {
		if e.Channel.Topic.IsZero() || e.Sender.IsZero() {
			return bad(fmt.Sprintf("sequence entry on the zero topic or sender ID (partition %d)", e.Channel.Partition), nil)
		}
	}
	// DecodeVC rejects every malformed clock; re-encoding guards that the
	// text is the one form of its token, so tokens compare by their text.
	if re, err := headers.EncodeVC(c); err != nil || !bytes.Equal(re, b) {
		return bad("not the canonical encoding of its clock", err)
	}
	return TokenOf(c), nil
}
