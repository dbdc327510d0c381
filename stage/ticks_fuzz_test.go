package stage

import (
	"encoding/binary"
	"errors"
	"testing"
)

// FuzzDecodeTick: any bytes on a tick topic decode to a tick or a typed
// codec error, never a panic; an 8-byte value round-trips.
func FuzzDecodeTick(f *testing.F) {
	f.Add(binary.BigEndian.AppendUint64(nil, 1767323105000))
	f.Add([]byte{})
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, v []byte) {
		tk, err := decodeTick(&rawMessage{topic: "app-s-ticks", value: v})
		if len(v) != 8 {
			var ce *CodecError
			if err == nil || !errors.As(err, &ce) || ce.Topic != "app-s-ticks" {
				t.Fatalf("%x: err %v, want a CodecError naming the topic", v, err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if got := binary.BigEndian.AppendUint64(nil, uint64(tk.Time.UnixMilli())); string(got) != string(v) {
			t.Fatalf("%x decoded to %v, which encodes as %x", v, tk.Time, got)
		}
	})
}
