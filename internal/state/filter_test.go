package state

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/protocol"
)

// checkReads fails unless Prefetch and Get of every key of model, and of
// keys never written, answer as model does.
func checkReads(t *testing.T, s *Store, model map[string][]byte, unseen []string) {
	t.Helper()
	ctx := context.Background()
	keys := append([]string{}, unseen...)
	for k := range model {
		keys = append(keys, k)
	}
	if err := s.Prefetch(ctx, keys); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		v, ok, err := s.Get(k)
		w, wok := model[k]
		if err != nil || ok != wok || !bytes.Equal(v, w) {
			t.Fatalf("Get(%q) = %q, %v, %v; want %q, %v", k, v, ok, err, w, wok)
		}
	}
}

func manyKeys(prefix string, n int) (map[string][]byte, []protocol.Mutation) {
	model := make(map[string][]byte, n)
	muts := make([]protocol.Mutation, 0, n)
	for i := range n {
		k, v := fmt.Sprintf("\x02%s%06d", prefix, i), fmt.Appendf(nil, "v%d", i)
		model[k] = v
		muts = append(muts, protocol.Mutation{Key: k, Value: v})
	}
	return model, muts
}

func unseenKeys(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("\x02never%06d", i)
	}
	return out
}

// TestKeyFilterNeverHidesAHeldKey: the key filter answers "absent" only for
// keys the file does not hold, whichever way the file came to hold them —
// Applies after the filter was built (through deletes), a file another
// store wrote before this one opened it (a task's store before a rescope,
// a standby's before the takeover), a changelog restored into a store
// whose filter was built, and a Reset. It also checks that the filter
// spares most queries for keys never written, or a filter that always says
// "maybe" would pass. (Checked by breaking it: without the filter's adds in Apply, or with the
// file's keys left out of the build, Get answers "absent" for held keys.)
func TestKeyFilterNeverHidesAHeldKey(t *testing.T) {
	ctx := context.Background()
	unseen := unseenKeys(2000)

	t.Run("applied", func(t *testing.T) {
		s, err := Open(ctx, filepath.Join(t.TempDir(), "t.db"), CacheBytes(64<<20))
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		checkReads(t, s, nil, unseen) // builds the filter on the empty file
		rng := rand.New(rand.NewPCG(1, 2))
		model := map[string][]byte{}
		for round := range 5 {
			m, muts := manyKeys(fmt.Sprintf("r%d-", round), 10_000)
			for k, v := range m {
				model[k] = v
			}
			for range 500 { // deletes of held keys
				k := fmt.Sprintf("\x02r%d-%06d", rng.IntN(round+1), rng.IntN(10_000))
				muts = append(muts, protocol.Mutation{Key: k, Delete: true})
				delete(model, k)
			}
			if err := s.Apply(ctx, lastPerKey(muts), int64(round+1), time.Time{}); err != nil {
				t.Fatal(err)
			}
			s.DropCache() // reads go past the value cache
			checkReads(t, s, model, unseen)
		}
		if b := s.filter.bytes(); b > filterMax(s.CacheLimit()) || s.cache.limit != s.CacheLimit()-b {
			t.Fatalf("filter takes %d bytes, value cache %d of %d: want the filter within an eighth, the cache the rest", b, s.cache.limit, s.CacheLimit())
		}
		spared := 0
		for _, k := range unseen {
			if !s.filter.mayHold(k) {
				spared++
			}
		}
		if spared < len(unseen)*9/10 {
			t.Fatalf("filter spares %d of %d queries for unseen keys, want 90%%", spared, len(unseen))
		}
	})

	t.Run("written before this store opened", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "t.db")
		model, muts := manyKeys("k", 5000)
		w := open(t, path)
		checkReads(t, w, nil, unseen)
		if err := w.Apply(ctx, muts, 1, time.Time{}); err != nil {
			t.Fatal(err)
		}
		w.Close() // the standby or the former owner lets go of the file
		checkReads(t, open(t, path), model, unseen)
	})

	t.Run("restored", func(t *testing.T) {
		l := newChangelog(t, nil)
		model, muts := manyKeys("a", 3000)
		l.commit(ctx, time.Now(), muts...)
		s := open(t, filepath.Join(t.TempDir(), "t.db"))
		l.restore(ctx, s, time.Now())   // wipes the unknown file first: a Reset
		checkReads(t, s, model, unseen) // builds the filter
		more, muts := manyKeys("b", 3000)
		l.commit(ctx, time.Now(), muts...)
		l.restore(ctx, s, time.Now()) // from the checkpoint on, over the filter
		for k, v := range more {
			model[k] = v
		}
		checkReads(t, s, model, unseen)
	})

	t.Run("reset", func(t *testing.T) {
		s := open(t, filepath.Join(t.TempDir(), "t.db"))
		_, old := manyKeys("old", 1000)
		if err := s.Apply(ctx, old, 1, time.Time{}); err != nil {
			t.Fatal(err)
		}
		checkReads(t, s, nil, unseen)
		if err := s.Reset(ctx, Incarnation{Cluster: "c"}); err != nil {
			t.Fatal(err)
		}
		model, muts := manyKeys("new", 1000)
		if err := s.Apply(ctx, muts, 1, time.Time{}); err != nil {
			t.Fatal(err)
		}
		stale := make([]string, 0, len(old))
		for _, m := range old {
			stale = append(stale, m.Key)
		}
		checkReads(t, s, model, append(stale, unseen...))
	})
}

// TestKeyFilterGrows: past its first layer's keys the filter adds layers
// within its bound, and still holds every key added, and past the bound it
// still does, at a higher false-positive rate.
func TestKeyFilterGrows(t *testing.T) {
	const max = 512 << 10
	f := newKeyFilter(0, max)
	unseen := unseenKeys(5000)
	for i := range 400_000 {
		f.add(fmt.Sprintf("k%d", i))
		if f.bytes() > max {
			t.Fatalf("after %d keys the filter takes %d bytes, bound %d", i+1, f.bytes(), max)
		}
		if i == 100_000 {
			spared := 0
			for _, k := range unseen {
				if !f.mayHold(k) {
					spared++
				}
			}
			if spared < len(unseen)*95/100 {
				t.Fatalf("after %d keys, %d layers, the filter spares %d of %d unseen keys, want 95%%", i+1, len(f.layers), spared, len(unseen))
			}
		}
	}
	if len(f.layers) < 3 {
		t.Fatalf("%d layers after 400,000 keys, want it grown", len(f.layers))
	}
	for i := range 400_000 {
		if k := fmt.Sprintf("k%d", i); !f.mayHold(k) {
			t.Fatalf("%q added but ruled out", k)
		}
	}
}

// TestKeyFilterBuiltOverManyPrefetches: a file of more keys than one
// Prefetch scans is added to the filter a part each Prefetch, in key
// order, while Applies write keys before and past the scan's position and
// delete others; every read meanwhile and after answers as the file does,
// and the filter completes. (Checked by breaking it: a filter taken as
// complete after its first part, or one that did not take the puts of
// Applies while being built, hides held keys.)
func TestKeyFilterBuiltOverManyPrefetches(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "t.db")
	model, muts := manyKeys("k", 2*filterScanKeys+100)
	w := open(t, path)
	if err := w.Apply(ctx, muts, 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	s := open(t, path)
	rng := rand.New(rand.NewPCG(9, 10))
	unseen := unseenKeys(500)
	for step := 0; !s.filterBuilt; step++ {
		if step > 10 {
			t.Fatalf("filter not built after %d prefetches", step)
		}
		var sample []string
		for range 300 {
			sample = append(sample, fmt.Sprintf("\x02k%06d", rng.IntN(2*filterScanKeys+100)))
		}
		if err := s.Prefetch(ctx, append(sample, unseen...)); err != nil {
			t.Fatal(err)
		}
		// Writes on both sides of the scan's position: new keys, and
		// deletes of held ones.
		var ws []protocol.Mutation
		for range 50 {
			k := fmt.Sprintf("\x02k%06d-new%d", rng.IntN(2*filterScanKeys+100), step)
			ws = append(ws, protocol.Mutation{Key: k, Value: []byte("n")})
			model[k] = []byte("n")
			d := fmt.Sprintf("\x02k%06d", rng.IntN(2*filterScanKeys+100))
			ws = append(ws, protocol.Mutation{Key: d, Delete: true})
			delete(model, d)
		}
		if err := s.Apply(ctx, lastPerKey(ws), int64(step+2), time.Time{}); err != nil {
			t.Fatal(err)
		}
		s.DropCache()
		for k := range model {
			if strings.Contains(k, "-new") {
				sample = append(sample, k)
			}
		}
		check := map[string][]byte{}
		for _, k := range sample {
			if v, ok := model[k]; ok {
				check[k] = v
			}
		}
		checkReads(t, s, check, unseen)
	}
	checkReads(t, s, model, unseen)
}
