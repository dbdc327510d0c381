package protocol

import (
	"errors"
	"strconv"

	"github.com/parsley-go/parsley/headers"
)

// Sentinel errors. Every error the node returns wraps one of these (or
// headers.ErrUndecodable, or an error from the Store or BrokerOffsets) inside
// an *Error that names the coordinate, channel, topic or store key at fault.
var (
	// ErrInvalidConfig: the Config cannot describe a node (missing store,
	// duplicate input, zero topic ID, negative partition, ...).
	ErrInvalidConfig = errors.New("invalid node configuration")

	// ErrUndeclaredChannel: a record or position advance names a channel the
	// node was not configured to consume.
	ErrUndeclaredChannel = errors.New("channel not declared as an input")

	// ErrUndeclaredSink: PrepareSend names a topic that is not a declared
	// sink.
	ErrUndeclaredSink = errors.New("topic not declared as a sink")

	// ErrOutOfOrderFeed: a record's offset is at or below one already fed
	// on its channel in this incarnation (host duty H1 broken).
	ErrOutOfOrderFeed = errors.New("record fed out of offset order")

	// ErrInvalidRecord: a record or position has a negative offset.
	ErrInvalidRecord = errors.New("invalid record or position")

	// ErrHeldOnRemovedInput: the store holds records on a channel that is no
	// longer declared as an input. They can be neither delivered (no source)
	// nor discarded (fail closed): redeclare the input or reset the state.
	ErrHeldOnRemovedInput = errors.New("held records on a removed input")

	// ErrUnknownStateFormat: the store was written in a format this build
	// does not know.
	ErrUnknownStateFormat = errors.New("unknown state format")

	// ErrCorruptState: a store value does not decode, or the held entries
	// disagree with their queue's indices.
	ErrCorruptState = errors.New("corrupt protocol state")

	// ErrSinkMissing: a declared sink topic does not exist at init, so the
	// node cannot know where its sequences there must start.
	ErrSinkMissing = errors.New("declared sink topic does not exist")

	// ErrNodeFailed: an earlier call failed in a way that left the node's
	// memory and its store out of step (a Store or BrokerOffsets error
	// mid-step). Discard the node and rebuild it from committed state.
	ErrNodeFailed = errors.New("node failed earlier; rebuild it from committed state")
)

// Error is the error type the node returns. It wraps the cause (a sentinel
// above, headers.ErrUndecodable, or a Store or BrokerOffsets error), so
// errors.Is and errors.As both work, and names what was at fault.
type Error struct {
	Op      string          // the method or init phase, e.g. "OnRecord", "init: restore queue"
	Channel headers.Channel // the channel at fault, when HasChannel
	Offset  int64           // the offset at fault, when HasOffset
	Topic   headers.TopicID // the topic at fault, when non-zero and no channel applies
	Key     string          // the store key at fault, when non-empty
	Err     error           // the cause

	HasChannel bool
	HasOffset  bool
}

func (e *Error) Error() string {
	s := "protocol: " + e.Op
	switch {
	case e.HasChannel && e.HasOffset:
		s += " " + headers.Coordinate{Channel: e.Channel, Offset: e.Offset}.String()
	case e.HasChannel:
		s += " " + e.Channel.String()
	case !e.Topic.IsZero():
		s += " topic " + e.Topic.String()
	}
	if e.Key != "" {
		s += " key " + strconv.Quote(e.Key)
	}
	return s + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

func coordErr(op string, ch headers.Channel, off int64, err error) error {
	return &Error{Op: op, Channel: ch, Offset: off, HasChannel: true, HasOffset: true, Err: err}
}

func chanErr(op string, ch headers.Channel, err error) error {
	return &Error{Op: op, Channel: ch, HasChannel: true, Err: err}
}

func keyErr(op, key string, err error) error {
	return &Error{Op: op, Key: key, Err: err}
}

// corrupt returns a wrapped ErrCorruptState naming key.
func corrupt(op, key, reason string) error {
	return &Error{Op: op, Key: key, Err: &reasonError{reason: reason, err: ErrCorruptState}}
}

type reasonError struct {
	reason string
	err    error
}

func (e *reasonError) Error() string { return e.err.Error() + ": " + e.reason }
func (e *reasonError) Unwrap() error { return e.err }

func because(err error, reason string) error { return &reasonError{reason: reason, err: err} }
