package view

import (
	"errors"
	"testing"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
)

// A task state the protocol cannot read fails a token read, with the
// view's and the protocol's error, rather than answer from a guess.
func TestUnreadableTaskState(t *testing.T) {
	c := new(headers.Clock)
	c.SetOffset(headers.Channel{Topic: headers.TopicID{1}, Partition: 0}, 3)
	tok := TokenOf(c)
	for _, tc := range []struct {
		kv   map[string][]byte
		want error
	}{
		{map[string][]byte{"v": {0, 0, 0, 9}}, protocol.ErrUnknownStateFormat},
		{map[string][]byte{"v": {0, 0, 0, 2}, "scope": {0, 0, 0, 7}}, protocol.ErrCorruptState},
	} {
		_, err := pendingClaims(tc.kv, tok)
		if !errors.Is(err, ErrUnknownState) || !errors.Is(err, tc.want) {
			t.Errorf("pendingClaims(%v) = %v; want ErrUnknownState and %v", tc.kv, err, tc.want)
		}
	}
}
