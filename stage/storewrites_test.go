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
	tk := &task{
		env:  &taskEnv{sent: new(sendResults), log: slog.New(slog.NewTextHandler(io.Discard, nil))},
		st:   &Stage{name: "s"},
		kv:   kv,
		node: new(protocol.Node), // commit only asks whether there is one
	}
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
	}
	tk.closeStore()
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
