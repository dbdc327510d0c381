package stagetest

import (
	"github.com/parsley-go/parsley/internal/rig/aliascodec"
	"github.com/parsley-go/parsley/stage"
)

// Int64View is a zero-copy view of an int64 held big-endian in eight
// bytes it does not own, as a flatbuffers or capnp accessor is: Add
// updates those bytes in place. See AliasingInt64.
type Int64View = aliascodec.Int64

// NewInt64View returns a view of n over eight new bytes.
func NewInt64View(n int64) Int64View { return aliascodec.NewInt64(n) }

// AliasingInt64 returns a codec that shares memory with the runtime in
// both directions, as zero-copy encodings do: Decode returns a view of the
// very bytes it is given, and Encode returns the viewed bytes themselves.
// A fold over it that updates its state in place must give exactly the
// outputs and changelog of a fold over stage.Int64, under aborts, crashes
// and rebalances (docs/codecs.md); use it to check that a stage keeps the
// codec contract's promises, or that your own zero-copy state survives. It
// writes what stage.Int64 writes.
func AliasingInt64() stage.Codec[Int64View] { return aliascodec.Codec{} }
