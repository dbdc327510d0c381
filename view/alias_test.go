package view

import (
	"testing"

	"github.com/parsley-go/parsley/internal/state"
	"github.com/parsley-go/parsley/stage"
)

// TestReadsDoNotAliasTheReplica: a state codec may decode in place (Bytes
// returns its input), and callers own what a read returns. A caller that
// overwrites every state it is handed must not change what the replica
// holds: the next read still returns what the committed step wrote.
func TestReadsDoNotAliasTheReplica(t *testing.T) {
	kb := []byte("k")
	v := &View[string, []byte]{
		keys: stage.String(), states: stage.Bytes(), nparts: 1,
		parts: map[int32]*replica{0: newReplica(0)},
	}
	v.parts[0].kv[state.FoldKey(kb)], v.parts[0].ready = []byte("committed"), true
	got, ok, err := v.Get("k")
	if err != nil || !ok {
		t.Fatalf("Get: %q, %v, %v", got, ok, err)
	}
	copy(got, "XXXXXXXXX")
	for e, err := range v.All() {
		if err != nil {
			t.Fatal(err)
		}
		copy(e.State, "YYYYYYYYY")
	}
	if again, _, _ := v.Get("k"); string(again) != "committed" {
		t.Fatalf("after the caller overwrote its copies the replica holds %q, want %q", again, "committed")
	}
}
