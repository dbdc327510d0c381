package view

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"

	"github.com/parsley-go/parsley/headers"
)

// The view reads a task's protocol state straight from the changelog
// records the protocol's store writes: the layout documented in
// docs/protocol-state.md (format version 2, readable version 1) and
// pinned by the protocol's TestStoreLayoutGolden. Only what a token needs
// is decoded: the scope's inputs, the frontiers, the hold queues' offsets
// and the delivered-sequence marks.
const (
	keyVersion = "v"
	keyScope   = "scope"
	pfxFront   = "f/"
	pfxQueue   = "q/"
	pfxDS      = "ds/"
)

// ErrUnknownState: a task's protocol state in the changelog is of a format
// this build cannot read, or is malformed; the view refuses to answer
// token reads for that task rather than guess.
var ErrUnknownState = errors.New("view: unreadable protocol state in the changelog")

// chanKey is the protocol store's text form of a channel.
func chanKey(ch headers.Channel) string {
	var b [36 + 1 + 10]byte
	copy(b[:], ch.Topic.String())
	b[36] = ':'
	p := strconv.AppendUint(nil, uint64(uint32(ch.Partition)), 10)
	for i := range 10 {
		b[37+i] = '0'
	}
	copy(b[47-len(p):], p)
	return string(b[:])
}

func entryKey(ck string, idx int64) string {
	return fmt.Sprintf("%s%s/e/%016x", pfxQueue, ck, uint64(idx))
}

// checkVersion refuses a task state whose format is not 1 or 2.
func checkVersion(kv map[string][]byte) error {
	b, ok := kv[keyVersion]
	if !ok {
		return nil // no state written yet
	}
	if len(b) != 4 {
		return fmt.Errorf("%w: key %q: %d bytes, want 4", ErrUnknownState, keyVersion, len(b))
	}
	if v := binary.BigEndian.Uint32(b); v != 1 && v != 2 {
		return fmt.Errorf("%w: key %q: format version %d (this build reads 1 and 2)", ErrUnknownState, keyVersion, v)
	}
	return nil
}

// scopeInputs decodes the inputs of the task's scope; ok is false when the
// task has committed no scope yet (it has never built its node).
func scopeInputs(kv map[string][]byte) (map[headers.Channel]bool, bool, error) {
	b, ok := kv[keyScope]
	if !ok {
		return nil, false, nil
	}
	bad := func(why string) error { return fmt.Errorf("%w: key %q: %s", ErrUnknownState, keyScope, why) }
	if len(b) < 4 {
		return nil, false, bad("truncated input count")
	}
	n := int(binary.BigEndian.Uint32(b))
	b = b[4:]
	if n < 0 || n > len(b)/20 {
		return nil, false, bad("input count exceeds the value")
	}
	ins := make(map[headers.Channel]bool, n)
	for range n {
		var ch headers.Channel
		copy(ch.Topic[:], b[:16])
		ch.Partition = int32(binary.BigEndian.Uint32(b[16:20]))
		ins[ch] = true
		b = b[20:]
	}
	return ins, true, nil
}

// frontier decodes f/<ch>: the offset at or below which everything on ch
// was delivered or skipped; -1 and false when the key is absent.
func frontier(kv map[string][]byte, ck string) (int64, bool, error) {
	b, ok := kv[pfxFront+ck]
	if !ok {
		return -1, false, nil
	}
	if len(b) != 8 && len(b) != 16 {
		return 0, false, fmt.Errorf("%w: key %q: %d bytes, want 8 or 16", ErrUnknownState, pfxFront+ck, len(b))
	}
	f := int64(binary.BigEndian.Uint64(b))
	if f < -1 {
		return 0, false, fmt.Errorf("%w: key %q: frontier %d", ErrUnknownState, pfxFront+ck, f)
	}
	return f, true, nil
}

// held says whether the record at offset on the channel is in the task's
// committed hold queue.
func held(kv map[string][]byte, ck string, offset int64) (bool, error) {
	m, ok := kv[pfxQueue+ck+"/m"]
	if !ok {
		return false, nil
	}
	if len(m) != 16 {
		return false, fmt.Errorf("%w: key %q: %d bytes, want 16", ErrUnknownState, pfxQueue+ck+"/m", len(m))
	}
	head, tail := int64(binary.BigEndian.Uint64(m)), int64(binary.BigEndian.Uint64(m[8:]))
	if head < 0 || tail < head {
		return false, fmt.Errorf("%w: key %q: indices %d..%d", ErrUnknownState, pfxQueue+ck+"/m", head, tail)
	}
	for i := head; i < tail; i++ {
		e, ok := kv[entryKey(ck, i)]
		if !ok || len(e) < 8 {
			continue
		}
		if int64(binary.BigEndian.Uint64(e)) == offset {
			return true, nil
		}
	}
	return false, nil
}

// deliveredSeq decodes ds/<ch>/<sender>: the highest send sequence
// delivered from sender on ch; -1 when none was.
func deliveredSeq(kv map[string][]byte, ck string, s headers.SenderID) (int64, error) {
	k := pfxDS + ck + "/" + s.String()
	b, ok := kv[k]
	if !ok {
		return -1, nil
	}
	if len(b) != 16 {
		return 0, fmt.Errorf("%w: key %q: %d bytes, want 16", ErrUnknownState, k, len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}
