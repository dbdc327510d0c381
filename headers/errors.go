package headers

import (
	"errors"
	"strconv"
)

var (
	// ErrUndecodable is wrapped by every error a decoder returns: the stamp
	// is present but malformed, and the receiver must fail closed rather
	// than treat it as absent.
	ErrUndecodable = errors.New("undecodable causal metadata")

	// ErrReservedHeader is wrapped when an application header uses a name
	// reserved for causal metadata: vc, vc-sender, vc-seq, or any name
	// starting with "parsley.".
	ErrReservedHeader = errors.New("reserved header name")

	// ErrUnencodable is wrapped when a clock cannot be written in the
	// requested dialect: a sequence entry in the causes dialect, the zero
	// topic ID, a negative partition, or an out-of-range position.
	ErrUnencodable = errors.New("clock not encodable")
)

// DecodeError describes where a header value is malformed. It wraps
// ErrUndecodable.
type DecodeError struct {
	Header string // header key, e.g. "vc" or "parsley.causes"
	Offset int    // byte offset into the value where the fault was found
	Reason string
}

func (e *DecodeError) Error() string {
	return "headers: " + e.Header + ": byte " + strconv.Itoa(e.Offset) + ": " + e.Reason
}

// Unwrap returns ErrUndecodable.
func (e *DecodeError) Unwrap() error { return ErrUndecodable }

// EncodeError describes why a clock cannot be encoded. It wraps
// ErrUnencodable.
type EncodeError struct {
	Dialect string // "vc" or "parsley.causes"
	Reason  string
}

func (e *EncodeError) Error() string { return "headers: encode " + e.Dialect + ": " + e.Reason }

// Unwrap returns ErrUnencodable.
func (e *EncodeError) Unwrap() error { return ErrUnencodable }

// ReservedHeaderError names an application header that uses a reserved
// name. It wraps ErrReservedHeader.
type ReservedHeaderError struct {
	Key string
}

func (e *ReservedHeaderError) Error() string {
	return "headers: application header " + strconv.Quote(e.Key) + " uses a reserved name"
}

// Unwrap returns ErrReservedHeader.
func (e *ReservedHeaderError) Unwrap() error { return ErrReservedHeader }

func itoa(v int64) string { return strconv.FormatInt(v, 10) }
