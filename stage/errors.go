package stage

// The errors the package returns: sentinels for errors.Is and the typed
// errors that name the stage, record or codec at fault.

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/state"
)

var (
	// ErrInvalidStage: a stage declaration cannot be built (empty name, a
	// topic consumed twice, a fold without state, ...). Build returns every
	// problem at once, each wrapping this.
	ErrInvalidStage = errors.New("invalid stage")

	// ErrInvalidConfig: the Config or the set of stages cannot run, or an
	// option would weaken exactly-once processing.
	ErrInvalidConfig = errors.New("invalid configuration")

	// ErrTopology: the cluster does not match the declared stages (a
	// missing topic, source partition counts that differ, a changelog with
	// the wrong partition count).
	ErrTopology = errors.New("topology check failed")

	// ErrUndeclaredSink: an emission names a topic the stage did not
	// declare as a sink. The step fails.
	ErrUndeclaredSink = errors.New("emission to an undeclared sink")

	// ErrCodec: a codec failed to encode or decode. The step fails.
	ErrCodec = errors.New("codec failure")

	// ErrPanic: user code panicked. The step fails.
	ErrPanic = errors.New("panic in user code")
)

// StepError is a failed step: the stage and the record being processed
// when the failure happened, and the cause (a handler's error, a
// *PanicError, a *CodecError, ErrUndeclaredSink, headers.ErrUndecodable
// for a record with a corrupt stamp, headers.ErrReservedHeader, ...).
// Nothing the step did is visible: its transaction aborted.
type StepError struct {
	Stage     string
	Topic     string
	Partition int32
	Offset    int64 // -1 when no record was being processed
	Err       error
}

func (e *StepError) Error() string {
	s := "stage " + strconv.Quote(e.Stage)
	if e.Topic != "" {
		s += " at " + e.Topic + "[" + strconv.FormatInt(int64(e.Partition), 10) + "]"
		if e.Offset >= 0 {
			s += "@" + strconv.FormatInt(e.Offset, 10)
		}
	}
	return s + ": " + e.Err.Error()
}

func (e *StepError) Unwrap() error { return e.Err }

// CodecError is a codec failure on one part of a record.
type CodecError struct {
	Topic string // the topic, or "" for fold state
	Part  string // "key", "value" or "state"
	Op    string // "encode" or "decode"
	Err   error
}

func (e *CodecError) Error() string {
	where := "state"
	if e.Topic != "" {
		where = e.Topic + " " + e.Part
	}
	return e.Op + " " + where + ": " + e.Err.Error()
}

func (e *CodecError) Unwrap() []error { return []error{ErrCodec, e.Err} }

// PanicError is a recovered panic from user code.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }
func (e *PanicError) Unwrap() error { return ErrPanic }

// re-exported for errors.Is convenience in user code.
var (
	// ErrUndecodable is headers.ErrUndecodable: a record's causal stamp does
	// not decode. The record is never delivered.
	ErrUndecodable = headers.ErrUndecodable
	// ErrReservedHeader is headers.ErrReservedHeader: an emission carries a
	// header name reserved for causal metadata.
	ErrReservedHeader = headers.ErrReservedHeader
	// ErrUnknownStateSchema: a task's SQLite file was written by a schema
	// version this build does not know. Run stops rather than guess.
	ErrUnknownStateSchema = state.ErrUnknownSchema
	// ErrChangelogLost: a stage's changelog — the same topic ID on the same
	// cluster — ends before a task store's checkpoint, so the brokers lost
	// committed records. Run stops; the message names the store and what
	// the operator can do (docs/state-and-recovery.md).
	ErrChangelogLost = state.ErrChangelogBehind
)
