// Package aliascodec is a state codec that shares memory with the bytes it
// is given, in both directions, as zero-copy encodings do (flatbuffers,
// capnp, an unsafe cast over a fixed layout): Decode returns a view of its
// input, the view's updates write into those bytes, and Encode returns the
// viewed bytes themselves. It exists to prove the runtime keeps nothing it
// hands to user code and nothing user code hands back (docs/codecs.md): a
// fold over it must give exactly the outputs and changelog of a fold over a
// copying codec. Package stagetest exports it; it lives here, free of the
// stage package, so that stage's own tests can use it too.
package aliascodec

import (
	"encoding/binary"
	"fmt"
)

// Int64 is an int64 held big-endian in eight bytes it does not own.
type Int64 struct{ b []byte }

// NewInt64 returns a view of n over eight new bytes.
func NewInt64(n int64) Int64 { return Int64{binary.BigEndian.AppendUint64(nil, uint64(n))} }

// Value returns the int64 the view holds; the zero view holds 0.
func (v Int64) Value() int64 {
	if len(v.b) != 8 {
		return 0
	}
	return int64(binary.BigEndian.Uint64(v.b))
}

// Add adds d to the viewed bytes in place and returns the sum. The zero
// view first takes eight bytes of its own.
func (v *Int64) Add(d int64) int64 {
	if len(v.b) != 8 {
		v.b = make([]byte, 8)
	}
	n := int64(binary.BigEndian.Uint64(v.b)) + d
	binary.BigEndian.PutUint64(v.b, uint64(n))
	return n
}

// Codec encodes an Int64 as its eight bytes, big-endian (what the stage's
// Int64 codec writes), without copying either way.
type Codec struct{}

// Encode returns the bytes v views, not a copy (eight zero bytes for the
// zero view).
func (Codec) Encode(v Int64) ([]byte, error) {
	if v.b == nil {
		return make([]byte, 8), nil
	}
	if len(v.b) != 8 {
		return nil, fmt.Errorf("aliascodec: view of %d bytes, want 8", len(v.b))
	}
	return v.b, nil
}

// Decode returns a view of b itself. Any length but eight fails.
func (Codec) Decode(b []byte) (Int64, error) {
	if len(b) != 8 {
		return Int64{}, fmt.Errorf("aliascodec: %d bytes, want 8", len(b))
	}
	return Int64{b}, nil
}
