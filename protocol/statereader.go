package protocol

import (
	"encoding/binary"
	"fmt"

	"github.com/parsley-go/parsley/headers"
)

// StateReader reads a node's committed protocol state from the key-value
// pairs its store holds (the changelog records a stage task writes),
// without a Node: what a read-only replica of a task (package view) needs
// to tell whether the task has delivered a record. It decodes the layout
// the Node writes (docs/protocol-state.md, format versions 1 and 2), so a
// change of that layout changes both. It never writes, and refuses what it
// cannot read with ErrCorruptState or ErrUnknownStateFormat.
type StateReader struct {
	get func(key string) ([]byte, bool)
}

// ReadState returns a reader of the state get looks keys up in.
func ReadState(get func(key string) ([]byte, bool)) StateReader { return StateReader{get: get} }

func unreadable(key, why string, args ...any) error {
	return fmt.Errorf("%w: key %q: %s", ErrCorruptState, key, fmt.Sprintf(why, args...))
}

// CheckVersion refuses a state whose format version this build cannot
// read; a state with no version key (nothing written yet) passes.
func (r StateReader) CheckVersion() error {
	b, ok := r.get(keyVersion)
	if !ok {
		return nil
	}
	if len(b) != 4 {
		return unreadable(keyVersion, "%d bytes, want 4", len(b))
	}
	if v := binary.BigEndian.Uint32(b); v != formatVersion && v != formatVersion1 {
		return fmt.Errorf("%w: key %q: format version %d (this build reads %d and %d)", ErrUnknownStateFormat, keyVersion, v, formatVersion1, formatVersion)
	}
	return nil
}

// Inputs returns the channels of the committed scope; ok is false when no
// scope was committed yet (the node has never written its state).
func (r StateReader) Inputs() (inputs map[headers.Channel]bool, ok bool, err error) {
	b, ok := r.get(keyScope)
	if !ok {
		return nil, false, nil
	}
	s, err := decodeScope(b)
	if err != nil {
		return nil, false, unreadable(keyScope, "%v", err)
	}
	inputs = make(map[headers.Channel]bool, len(s.inputs))
	for _, ch := range s.inputs {
		inputs[ch] = true
	}
	return inputs, true, nil
}

// Frontier returns the committed frontier on ch: every offset at or below
// it was delivered or skipped; -1 and false when none is recorded.
func (r StateReader) Frontier(ch headers.Channel) (int64, bool, error) {
	k := pfxFront + chanKey(ch)
	b, ok := r.get(k)
	if !ok {
		return -1, false, nil
	}
	f, _, ok := decodeFrontier(b)
	if !ok {
		return 0, false, unreadable(k, "not a frontier (%d bytes)", len(b))
	}
	return f, true, nil
}

// Held says whether the record at offset on ch is in the committed hold
// queue.
func (r StateReader) Held(ch headers.Channel, offset int64) (bool, error) {
	ck := chanKey(ch)
	mk := metaKey(ck)
	m, ok := r.get(mk)
	if !ok {
		return false, nil
	}
	head, tail, ok := decodePair(m)
	if !ok || head < 0 || tail < head {
		return false, unreadable(mk, "not queue indices (%d bytes)", len(m))
	}
	for i := head; i < tail; i++ {
		e, ok := r.get(entryKey(ck, i))
		if !ok || len(e) < 8 {
			continue
		}
		if int64(binary.BigEndian.Uint64(e)) == offset {
			return true, nil
		}
	}
	return false, nil
}

// DeliveredSeq returns the highest send sequence delivered from sender on
// ch, -1 when none was.
func (r StateReader) DeliveredSeq(ch headers.Channel, sender headers.SenderID) (int64, error) {
	k := dsKey(chanKey(ch), sender)
	b, ok := r.get(k)
	if !ok {
		return -1, nil
	}
	seq, _, ok := decodePair(b)
	if !ok {
		return 0, unreadable(k, "%d bytes, want 16", len(b))
	}
	return seq, nil
}
