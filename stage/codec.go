package stage

// Codecs: the Codec interface and the built-in codecs.

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
)

// Codec converts values of T to and from bytes. Codecs never see nil: a nil
// key or value passes through the runtime untouched (a tombstone stays a
// tombstone), so Encode and Decode may assume their input is present.
//
// A codec must be total on real data and its own inverse: Decode accepts
// every byte string Encode produces, and Decode(Encode(v)) equals v. Failure
// is loud: an error from either side fails the step, never guesses. A key
// codec must also be canonical — the same key always encodes to the same
// bytes — because the encoded key chooses the partition and keys fold state.
//
// A codec must be safe for concurrent use by several goroutines: the
// runtime decodes a step's records on other goroutines ahead of their
// delivery (Config.DecodeAhead), while the step goroutine encodes. Every
// codec in this package is.
//
// Decode may return a value that shares memory with its input (a zero-copy
// view), and Encode may return memory its value shares, but Decode must not
// modify its input: a fetched record's bytes are read by every stage that
// consumes the topic. A fold's state is decoded from bytes the fold owns,
// so it may update its state in place (docs/codecs.md).
type Codec[T any] interface {
	Encode(v T) ([]byte, error)
	Decode(b []byte) (T, error)
}

type funcCodec[T any] struct {
	enc func(T) ([]byte, error)
	dec func([]byte) (T, error)
}

func (c funcCodec[T]) Encode(v T) ([]byte, error) { return c.enc(v) }
func (c funcCodec[T]) Decode(b []byte) (T, error) { return c.dec(b) }

// Of returns a codec from an encode and a decode function.
func Of[T any](encode func(T) ([]byte, error), decode func([]byte) (T, error)) Codec[T] {
	return funcCodec[T]{enc: encode, dec: decode}
}

// String returns the UTF-8 string codec. It accepts any bytes, as Kafka's
// StringSerializer does.
func String() Codec[string] {
	return Of(func(s string) ([]byte, error) { return []byte(s), nil },
		func(b []byte) (string, error) { return string(b), nil })
}

// Int64 returns the codec of Kafka's LongSerializer: eight bytes, big-endian.
// Any other length fails to decode.
func Int64() Codec[int64] {
	return Of(func(v int64) ([]byte, error) { return binary.BigEndian.AppendUint64(nil, uint64(v)), nil },
		func(b []byte) (int64, error) {
			if len(b) != 8 {
				return 0, fmt.Errorf("int64 codec: %d bytes, want 8", len(b))
			}
			return int64(binary.BigEndian.Uint64(b)), nil
		})
}

// Bytes returns the identity codec. Decode returns the bytes as fetched;
// handlers must not modify them.
func Bytes() Codec[[]byte] {
	return Of(func(b []byte) ([]byte, error) { return b, nil },
		func(b []byte) ([]byte, error) { return b, nil })
}

// JSON returns a codec that encodes with encoding/json. Decoding rejects
// trailing data. JSON is fine for values; for keys prefer a canonical codec
// (map key order and number formatting make JSON a poor key encoding).
func JSON[T any]() Codec[T] {
	return Of(func(v T) ([]byte, error) { return json.Marshal(v) },
		func(b []byte) (T, error) {
			var v T
			if err := json.Unmarshal(b, &v); err != nil {
				return v, err
			}
			return v, nil
		})
}
