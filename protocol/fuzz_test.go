package protocol

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/parsley-go/parsley/headers"
)

// FuzzDecodeHeld: the held-record decoder never panics, and every value it
// accepts re-encodes to the same bytes.
func FuzzDecodeHeld(f *testing.F) {
	for _, r := range []Record{
		{},
		{Key: []byte{}, Value: []byte("v"), Headers: []headers.Header{}},
		{Coordinate: at(a0, 9), Timestamp: -1, Key: []byte("k"), Headers: []headers.Header{{Key: "vc", Value: nil}, {Key: "", Value: []byte{}}}},
	} {
		f.Add(appendHeld(nil, &r))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var r Record
		if err := decodeHeld(&r, b); err != nil {
			return
		}
		if got := appendHeld(nil, &r); !bytes.Equal(got, b) {
			t.Fatalf("re-encoding differs:\n%x\n%x", got, b)
		}
	})
}

// FuzzDecodeScope: the scope decoder never panics, and accepted values
// re-encode to the same bytes.
func FuzzDecodeScope(f *testing.F) {
	f.Add(encodeScope(scope{}))
	f.Add(encodeScope(scope{inputs: []headers.Channel{a0, b0}, sinks: []headers.TopicID{tid(3)}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := decodeScope(b)
		if err != nil {
			return
		}
		if got := encodeScope(s); !bytes.Equal(got, b) {
			t.Fatalf("re-encoding differs:\n%x\n%x", got, b)
		}
	})
}

func TestChanKeyRoundTripAndOrder(t *testing.T) {
	for _, ch := range []headers.Channel{a0, {Topic: tid(1), Partition: 2147483647}} {
		got, ok := parseChanKey(chanKey(ch))
		if !ok || got != ch {
			t.Fatalf("%v → %q → %v", ch, chanKey(ch), got)
		}
	}
	if !(chanKey(chn(1, 2)) < chanKey(chn(1, 10))) {
		t.Fatal("partition text does not sort numerically")
	}
	if k := entryKey(chanKey(a0), 255); k != "q/"+chanKey(a0)+"/e/00000000000000ff" {
		t.Fatalf("entry key %q", k)
	}
}

// goldenState is the small state TestStoreLayoutGolden pins and
// TestStateReaderReadsWhatTheNodeWrote reads back: a tagged record
// from sender s delivered on a0, and one on b0 held for a0's offset 7,
// committed.
func goldenState(t *testing.T) (e *env, s headers.SenderID) {
	t.Helper()
	S := chn(31, 0)
	e = newEnv(t, []headers.Channel{a0, b0}, []headers.TopicID{S.Topic})
	n := e.node()
	s = headers.SenderID{0xee}
	feed(t, n, rec(t, a0, 1, st{sender: &s, seq: 2}))
	feed(t, n, &Record{Coordinate: at(b0, 0), Timestamp: 5, Key: []byte("k"), Headers: st{offs: []headers.OffsetEntry{off(a0, 7)}}.headers(t)})
	prepare(t, n, S)
	flush(t, n)
	return e, s
}

// TestStoreLayoutGolden pins the store keys and value bytes of a small
// state, so a change to the layout cannot pass silently (it must bump the
// format version).
func TestStoreLayoutGolden(t *testing.T) {
	e, _ := goldenState(t)
	ca, cb := "10000000-0000-0000-0000-000000000001:0000000000", "10000000-0000-0000-0000-000000000002:0000000000"
	vcB := "01" + "00000001" + "10000000000000000000000000000001" + "00000000" + "0000000000000007" + "00000000"
	want := map[string]string{
		"v":        "00000002",
		"scope":    "00000002" + "1000000000000000000000000000000100000000" + "1000000000000000000000000000000200000000" + "00000001" + "1000000000000000000000000000001f",
		"f/" + ca:  "0000000000000001" + "0000000000000001",
		"cc/" + cb: vcB,
		"ds/" + ca + "/ee000000-0000-0000-0000-000000000000": "0000000000000002" + "0000000000000001",
		"q/" + cb + "/m": "0000000000000000" + "0000000000000001",
		"q/" + cb + "/e/0000000000000000": "0000000000000000" + "0000000000000005" + "00000001" + "6b" + "ffffffff" +
			"00000001" + "00000002" + "7663" + "000000" + hexLen(vcB) + vcB,
		"sq/10000000-0000-0000-0000-00000000001f:0000000000": "0000000000000000",
	}
	got := map[string]string{}
	for _, m := range e.store.Entries() {
		got[m.Key] = hexBytes(m.Value)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("key %s\n got %s\nwant %s", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("store has %d keys, want %d: %v", len(got), len(want), got)
	}
}

func hexLen(hexStr string) string {
	n := len(hexStr) / 2
	return string("0123456789abcdef"[n>>4&0xf]) + string("0123456789abcdef"[n&0xf])
}

// FuzzRestore: whatever bytes a store holds under the node's keys, New
// neither panics nor accepts them silently as something else: it either
// restores, or fails with ErrCorruptState or ErrUnknownStateFormat.
func FuzzRestore(f *testing.F) {
	base := func(t testing.TB) *env {
		S := chn(31, 0)
		e := newEnv(t, []headers.Channel{a0, b0}, []headers.TopicID{S.Topic})
		n := e.node()
		s := headers.SenderID{3}
		feed(t, n, rec(t, a0, 2, st{offs: []headers.OffsetEntry{off(x0, 4)}, sender: &s, seq: 1}))
		feed(t, n, rec(t, b0, 0, st{offs: []headers.OffsetEntry{off(a0, 9)}, seqs: []headers.SeqEntry{sq(a0, s, 5)}}))
		feed(t, n, plain(b0, 1))
		prepare(t, n, S)
		flush(t, n)
		e.cfg.Inputs = []headers.Channel{a0, b0}
		return e
	}
	keys := base(f).store.Entries()
	for i, m := range keys {
		f.Add(uint8(i), m.Value)
	}
	f.Fuzz(func(t *testing.T, which uint8, v []byte) {
		e := base(t)
		k := keys[int(which)%len(keys)].Key
		_ = e.store.Put(k, v)
		n, err := New(context.Background(), e.cfg)
		if err != nil {
			if !errors.Is(err, ErrCorruptState) && !errors.Is(err, ErrUnknownStateFormat) {
				t.Fatalf("key %s: unexpected error %v", k, err)
			}
			return
		}
		if _, err := n.Release(); err != nil && !errors.Is(err, ErrCorruptState) {
			t.Fatalf("Release: %v", err)
		}
		_, _ = n.OnRecord(plain(a0, 100))
		_, _ = n.ExplainHolds()
	})
}
