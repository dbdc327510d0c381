package protocol

import (
	"errors"
	"testing"
)

// StateReader reads back what a Node wrote: the state of
// TestStoreLayoutGolden's scenario (a tagged record delivered on a0, one on
// b0 held for a0's offset 7). It decodes with the Node's own key and value
// codecs, so a layout change moves writer and reader together, while the
// golden test pins the layout itself.
func TestStateReaderReadsWhatTheNodeWrote(t *testing.T) {
	e, s := goldenState(t)
	kv := map[string][]byte{}
	for _, m := range e.store.Entries() {
		kv[m.Key] = m.Value
	}
	r := ReadState(func(k string) ([]byte, bool) { b, ok := kv[k]; return b, ok })
	if err := r.CheckVersion(); err != nil {
		t.Fatal(err)
	}
	ins, ok, err := r.Inputs()
	if err != nil || !ok || len(ins) != 2 || !ins[a0] || !ins[b0] {
		t.Errorf("Inputs = %v, %v, %v; want a0 and b0", ins, ok, err)
	}
	if f, ok, err := r.Frontier(a0); err != nil || !ok || f != 1 {
		t.Errorf("Frontier(a0) = %d, %v, %v; want 1", f, ok, err)
	}
	if f, ok, err := r.Frontier(b0); err != nil || ok || f != -1 {
		t.Errorf("Frontier(b0) = %d, %v, %v; want none (its record is held)", f, ok, err)
	}
	if h, err := r.Held(b0, 0); err != nil || !h {
		t.Errorf("Held(b0, 0) = %v, %v; want held", h, err)
	}
	if h, err := r.Held(b0, 1); err != nil || h {
		t.Errorf("Held(b0, 1) = %v, %v; want not held", h, err)
	}
	if d, err := r.DeliveredSeq(a0, s); err != nil || d != 2 {
		t.Errorf("DeliveredSeq(a0, %s) = %d, %v; want 2", s, d, err)
	}
	if d, err := r.DeliveredSeq(b0, s); err != nil || d != -1 {
		t.Errorf("DeliveredSeq(b0, %s) = %d, %v; want -1", s, d, err)
	}

	// What it cannot read it refuses, typed.
	kv[keyVersion] = []byte{0, 0, 0, 9}
	if err := r.CheckVersion(); !errors.Is(err, ErrUnknownStateFormat) {
		t.Errorf("CheckVersion of version 9 = %v, want ErrUnknownStateFormat", err)
	}
	kv[pfxFront+chanKey(a0)] = []byte{1, 2, 3}
	if _, _, err := r.Frontier(a0); !errors.Is(err, ErrCorruptState) {
		t.Errorf("Frontier of 3 bytes = %v, want ErrCorruptState", err)
	}
	kv[keyScope] = []byte{0, 0, 0, 9}
	if _, _, err := r.Inputs(); !errors.Is(err, ErrCorruptState) {
		t.Errorf("Inputs of a truncated scope = %v, want ErrCorruptState", err)
	}
}
