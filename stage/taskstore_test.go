package stage

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/state"
	"github.com/parsley-go/parsley/protocol"
)

// TestCommittedWritesReachTheFileInGroups commits random steps of puts and
// deletes through a task and checks, after every step, that reads see
// every committed step, that the file lags by at most storeEvery steps and
// holds exactly the state of the step its checkpoint names (what a restore
// replays the changelog from), and that closing writes the rest.
func TestCommittedWritesReachTheFileInGroups(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "task.db")
	kv, err := state.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	st := newTaskStore(&taskEnv{sent: new(sendResults), log: slog.New(slog.NewTextHandler(io.Discard, nil))}, "s", 0, "cl", kv)
	tk := &st
	tk.batch = protocol.NewBatch(tk.unwritten())
	rng := rand.New(rand.NewPCG(3, 4))
	model := make(map[string]string)                   // every committed step
	atCheckpoint := map[int64]map[string]string{0: {}} // the state as of each step's checkpoint
	began := time.Now()
	offset := int64(0)
	for step := range 60 {
		for range rng.IntN(20) {
			k := fmt.Sprintf("k%02d", rng.IntN(40))
			if rng.IntN(4) == 0 {
				_ = tk.batch.Delete(k)
				delete(model, k)
			} else {
				v := fmt.Sprintf("v%d-%d", step, rng.IntN(1000))
				_ = tk.batch.Put(k, []byte(v))
				model[k] = v
			}
		}
		if tk.batch.Len() > 0 {
			offset += int64(tk.batch.Len())
			tk.clNext = offset // the step's changelog records end here
			atCheckpoint[offset] = maps.Clone(model)
		}
		began = began.Add(time.Millisecond)
		if err := tk.commit(ctx, began); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		if got := storeContents(t, protocol.NewBatch(tk.unwritten())); !maps.Equal(got, model) {
			t.Fatalf("step %d: reads see %v, want every committed step: %v", step, got, model)
		}
		// A step's prefetch reads the file's values of its keys into the
		// cache, among them keys whose newer values are still unwritten:
		// reads must go on seeing every committed step, and once those
		// writes reach the file, the cache must hold them, not the value
		// prefetched before.
		keys := make([]string, 0, 40)
		for i := range 40 {
			if rng.IntN(2) == 0 {
				keys = append(keys, fmt.Sprintf("k%02d", i))
			}
		}
		if err := kv.Prefetch(ctx, keys); err != nil {
			t.Fatalf("step %d: prefetch: %v", step, err)
		}
		for i := range 40 {
			k := fmt.Sprintf("k%02d", i)
			v, ok, err := tk.committed().Get(k)
			if want, has := model[k]; err != nil || ok != has || string(v) != want {
				t.Fatalf("step %d: committed read of %s after a prefetch = %q, %v, %v; want %q, %v", step, k, v, ok, err, want, has)
			}
		}
		if tk.pendingSteps >= storeEvery {
			t.Fatalf("step %d: %d steps unwritten, want fewer than %d", step, tk.pendingSteps, storeEvery)
		}
		cp := kv.Checkpoint()
		want, ok := atCheckpoint[cp]
		if !ok {
			t.Fatalf("step %d: file checkpoint %d names no step's end", step, cp)
		}
		if got := storeContents(t, kv); !maps.Equal(got, want) {
			t.Fatalf("step %d: file at checkpoint %d holds %v, want %v", step, cp, got, want)
		}
		for i := range 40 {
			k := fmt.Sprintf("k%02d", i)
			v, ok, err := kv.Get(k) // through the cache
			if w, has := want[k]; err != nil || ok != has || string(v) != w {
				t.Fatalf("step %d: the store's read of %s = %q, %v, %v; want the file's %q, %v", step, k, v, ok, err, w, has)
			}
		}
	}
	tk.close()
	kv, err = state.Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer kv.Close()
	if kv.Checkpoint() != offset {
		t.Fatalf("closed file at checkpoint %d, want %d", kv.Checkpoint(), offset)
	}
	if got := storeContents(t, kv); !maps.Equal(got, model) {
		t.Fatalf("closed file holds %v, want %v", got, model)
	}
}

func storeContents(t *testing.T, s protocol.Store) map[string]string {
	t.Helper()
	out := make(map[string]string)
	if err := s.Scan("", func(k string, v []byte) error { out[k] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestUnwrittenWritesStayWithinTheirBound commits steps of few, large
// values, far below storeEvery steps and storeMaxKeys keys, and checks that
// after every commit the unwritten writes, counted here from their keys and
// values, hold at most unwrittenBound bytes, and that every committed step
// stays readable and reaches the file at close.
func TestUnwrittenWritesStayWithinTheirBound(t *testing.T) {
	ctx := context.Background()
	for _, cache := range []int64{-1, 8 << 20} {
		t.Run(fmt.Sprintf("cache=%d", cache), func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "task.db")
			kv, err := state.Open(ctx, path, state.CacheBytes(cache))
			if err != nil {
				t.Fatal(err)
			}
			st := newTaskStore(&taskEnv{sent: new(sendResults), log: slog.New(slog.NewTextHandler(io.Discard, nil))}, "s", 0, "cl", kv)
			tk := &st
			tk.batch = protocol.NewBatch(tk.unwritten())
			bound := max(kv.CacheLimit()/4, 1<<20)
			if got := unwrittenBound(kv); got != bound {
				t.Fatalf("unwrittenBound = %d, want %d (a quarter of the cache, at least 1 MiB)", got, bound)
			}
			rng := rand.New(rand.NewPCG(5, 6))
			model := make(map[string]string)
			began, offset, wrote := time.Now(), int64(0), 0
			for step := range storeEvery - 1 {
				for range 8 {
					k := fmt.Sprintf("k%03d", rng.IntN(400))
					v := fmt.Sprintf("%d-%0*d", step, 20<<10, rng.IntN(1000))
					_ = tk.batch.Put(k, []byte(v))
					model[k] = v
				}
				offset += int64(tk.batch.Len())
				tk.clNext = offset
				began = began.Add(time.Millisecond)
				cp := kv.Checkpoint()
				if err := tk.commit(ctx, began); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				if kv.Checkpoint() != cp {
					wrote++
				}
				var held int64
				for _, m := range tk.unwritten().Mutations() {
					held += int64(len(m.Key) + len(m.Value))
				}
				if held > bound {
					t.Fatalf("step %d: %d bytes unwritten, want at most %d", step, held, bound)
				}
				if tk.unwritten().Len() >= storeMaxKeys {
					t.Fatalf("step %d: %d keys unwritten: the key bound, not the byte bound, is tested", step, tk.unwritten().Len())
				}
				if got := storeContents(t, protocol.NewBatch(tk.unwritten())); !maps.Equal(got, model) {
					t.Fatalf("step %d: reads miss committed steps", step)
				}
			}
			if wrote < 2 {
				t.Fatalf("the file was written %d times in %d steps, want the byte bound to write it repeatedly", wrote, storeEvery-1)
			}
			tk.close()
			kv, err = state.Open(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			defer kv.Close()
			if got := storeContents(t, kv); !maps.Equal(got, model) {
				t.Fatal("closed file misses committed steps")
			}
		})
	}
}
