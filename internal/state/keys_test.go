package state

import (
	"bytes"
	"testing"
)

// TestKeyLayoutGolden pins the bytes of the store keys and names that
// stores and changelogs already written carry (keys.go): a change here
// strands them.
func TestKeyLayoutGolden(t *testing.T) {
	for _, tt := range []struct {
		name, got, want string
	}{
		{"FoldKey(nil)", FoldKey(nil), "\x01"},
		{"FoldKey(empty)", FoldKey([]byte{}), "\x02"},
		{"FoldKey(k1)", FoldKey([]byte("k1")), "\x02k1"},
		{"FoldKey(0x00 0xff)", FoldKey([]byte{0, 0xff}), "\x02\x00\xff"},
		{"TickSlot", TickSlot, "\x03tick"},
		{"ChangelogTopic", ChangelogTopic("shop", "ledger"), "shop-ledger-changelog"},
	} {
		if tt.got != tt.want {
			t.Errorf("%s = %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

// Fold keys, the tick slot and the protocol's ASCII keys never collide, and
// RecordKey inverts FoldKey.
func TestFoldKeysApart(t *testing.T) {
	keys := [][]byte{nil, {}, {0}, {1}, {2}, {3}, []byte("tick"), []byte("\x02a"), []byte("v"), []byte("f/x")}
	seen := map[string][]byte{}
	for _, k := range keys {
		fk := FoldKey(k)
		if prev, dup := seen[fk]; dup {
			t.Fatalf("record keys %q and %q share fold key %q", prev, k, fk)
		}
		seen[fk] = k
		if !IsFoldKey(fk) {
			t.Errorf("IsFoldKey(FoldKey(%q)) = false", k)
		}
		rk, isNil, ok := RecordKey(fk)
		if !ok || isNil != (k == nil) || (k != nil && !bytes.Equal([]byte(rk), k)) {
			t.Errorf("RecordKey(%q) = %q, %v, %v; want %q", fk, rk, isNil, ok, k)
		}
	}
	// The protocol's keys (docs/protocol-state.md) and the tick slot are
	// not fold keys.
	for _, k := range []string{TickSlot, "", "v", "scope", "ca", "f/10000000-0000-0000-0000-000000000001:0000000000", "q/x/m", "sq/x", "ds/x/y", "ack/x"} {
		if IsFoldKey(k) {
			t.Errorf("IsFoldKey(%q) = true", k)
		}
		if _, _, ok := RecordKey(k); ok {
			t.Errorf("RecordKey(%q) is ok", k)
		}
	}
}
