package stage

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/parsley-go/parsley/internal/state"
	"github.com/parsley-go/parsley/protocol"
)

// sharedState is the fold state view before #29: reads hand out the slices
// the batches keep. The control of BenchmarkFoldStateLoad.
type sharedState struct {
	batch *protocol.Batch
	key   string
}

func (f *sharedState) load() ([]byte, bool, error) { return f.batch.Get(f.key) }
func (f *sharedState) store(b []byte) error        { return f.batch.Put(f.key, b) }
func (f *sharedState) del() error                  { return f.batch.Delete(f.key) }

// BenchmarkFoldStateLoad measures what #29's copies cost a fold step: a
// counter fold (Int64 state; and a 256-byte JSON-ish state) over a key
// whose state is in the unwritten committed layer (the hot-key case) and
// one written earlier in the same step, through the copying view (copy)
// and the old shared one (shared, the control), in one run.
//
//	go test ./stage -run '^$' -bench BenchmarkFoldStateLoad -benchmem -count 5
func BenchmarkFoldStateLoad(b *testing.B) {
	ctx := context.Background()
	kv, err := state.Open(ctx, filepath.Join(b.TempDir(), "task.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer kv.Close()
	tk := &taskStore{kv: kv}
	for _, size := range []int{8, 256} {
		sd := &stateDecl[[]byte]{codec: Bytes(), nilable: true}
		step := func(s []byte) (Step[[]byte], error) {
			s[0]++ // in place: the copy is what keeps this safe
			return Next(s), nil
		}
		for _, where := range []string{"committed", "step"} {
			for _, view := range []string{"copy", "shared"} {
				b.Run(fmt.Sprintf("size=%d/%s/%s", size, where, view), func(b *testing.B) {
					p := tk.unwritten()
					p.Discard()
					_ = p.Put("\x02k", make([]byte, size))
					var batch *protocol.Batch
					if view == "copy" {
						batch = protocol.NewBatch(tk.committed())
					} else {
						batch = protocol.NewBatch(p)
					}
					if where == "step" {
						_ = batch.Put("\x02k", make([]byte, size))
					}
					var io stateIO = &foldState{batch: batch, key: "\x02k"}
					if view == "shared" {
						io = &sharedState{batch: batch, key: "\x02k"}
					}
					b.ReportAllocs()
					b.ResetTimer()
					for b.Loop() {
						if _, err := applyFold(sd, io, step); err != nil {
							b.Fatal(err)
						}
						if where == "committed" {
							batch.Discard() // the next call reads committed state again
						}
					}
				})
			}
		}
	}
}
