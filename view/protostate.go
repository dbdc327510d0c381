package view

import (
	"errors"
	"fmt"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
)

// The view reads a task's protocol state from the changelog records the
// protocol's store writes, through protocol.StateReader: the protocol's
// own decoding of its layout (docs/protocol-state.md), so a layout change
// cannot leave the view behind. Only what a token needs is read: the
// scope's inputs, the frontiers, the hold queues' offsets and the
// delivered-sequence marks.

// ErrUnknownState: a task's protocol state in the changelog is of a format
// this build cannot read, or is malformed; the view refuses to answer
// token reads for that task rather than guess. It is wrapped together with
// the protocol's error (protocol.ErrUnknownStateFormat or
// protocol.ErrCorruptState).
var ErrUnknownState = errors.New("view: unreadable protocol state in the changelog")

// taskState reads the committed protocol state held in kv.
type taskState struct{ r protocol.StateReader }

func readTask(kv map[string][]byte) taskState {
	return taskState{protocol.ReadState(func(k string) ([]byte, bool) { b, ok := kv[k]; return b, ok })}
}

func unknown(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrUnknownState, err)
}

func (s taskState) checkVersion() error { return unknown(s.r.CheckVersion()) }

func (s taskState) inputs() (map[headers.Channel]bool, bool, error) {
	ins, ok, err := s.r.Inputs()
	return ins, ok, unknown(err)
}

func (s taskState) frontier(ch headers.Channel) (int64, error) {
	f, _, err := s.r.Frontier(ch)
	return f, unknown(err)
}

func (s taskState) held(ch headers.Channel, offset int64) (bool, error) {
	h, err := s.r.Held(ch, offset)
	return h, unknown(err)
}

func (s taskState) deliveredSeq(ch headers.Channel, sender headers.SenderID) (int64, error) {
	d, err := s.r.DeliveredSeq(ch, sender)
	return d, unknown(err)
}
