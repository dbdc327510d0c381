package observer

import (
	"context"
	"unicode/utf8"

	"github.com/parsley-go/parsley/headers"
)

// PreviewBytes caps each key, value and header value in a Payload: enough
// to recognise a record, not enough to copy it.
const PreviewBytes = 256

// Payload is a size-capped preview of one record's key, value and
// headers. The store never holds payloads; a preview is read from the
// brokers when asked for, so a deployment that must not show them turns
// previews off (parsley-observe serve --no-payloads).
type Payload struct {
	Key, Value         Preview
	Headers            []HeaderPreview
	StampHeaderEntries int // stamp headers, shown decoded elsewhere
}

// Preview is the head of a byte string and its full size.
type Preview struct {
	Head []byte
	Size int
}

// Text returns the preview as text when it is valid UTF-8 without control
// characters, else as hex; and whether it was cut short.
func (p Preview) Text() (text string, isHex, cut bool) {
	cut = p.Size > len(p.Head)
	if utf8.Valid(p.Head) && printable(p.Head) {
		return string(p.Head), false, cut
	}
	const digits = "0123456789abcdef"
	b := make([]byte, 0, 3*len(p.Head))
	for i, c := range p.Head {
		if i > 0 {
			b = append(b, ' ')
		}
		b = append(b, digits[c>>4], digits[c&0xf])
	}
	return string(b), true, cut
}

func printable(b []byte) bool {
	for _, r := range string(b) {
		if r < 0x20 && r != '\n' && r != '\t' || r == 0x7f {
			return false
		}
	}
	return true
}

// HeaderPreview is one record header with its value previewed.
type HeaderPreview struct {
	Key   string
	Value Preview
}

func preview(b []byte) Preview {
	return Preview{Head: b[:min(len(b), PreviewBytes)], Size: len(b)}
}

// Payload reads the record at c from the brokers and returns a preview of
// its key, value and non-stamp headers. A record no longer on the brokers
// (deleted by retention, a marker) is an error wrapping ErrNotFound.
func (o *Observer) Payload(ctx context.Context, c headers.Coordinate) (*Payload, error) {
	rec, err := FetchRecord(ctx, o.cfg.Brokers, RefOf(c), o.cfg.ClientOpts...)
	if err != nil {
		return nil, err
	}
	p := &Payload{Key: preview(rec.Key), Value: preview(rec.Value)}
	for _, h := range rec.Headers {
		if isStampHeader(h.Key) {
			p.StampHeaderEntries++
			continue
		}
		p.Headers = append(p.Headers, HeaderPreview{Key: h.Key, Value: preview(h.Value)})
	}
	return p, nil
}
