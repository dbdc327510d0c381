package state

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/parsley-go/parsley/protocol"
)

// TestApplyMatchesModel applies random steps — runs of puts and deletes
// longer and shorter than a multi-row statement, keys written twice in one
// Apply — and checks every key's value against a map, through Get (which
// the cache answers for keys read before) and through a reopened file.
func TestApplyMatchesModel(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "t.db")
	s := open(t, path)
	rng := rand.New(rand.NewPCG(1, 2))
	model := map[string][]byte{}
	key := func(i int) string { return fmt.Sprintf("\x02k%03d", i) }
	const keys = 300
	check := func(s *Store, round int) {
		t.Helper()
		for i := range keys {
			v, ok, err := s.Get(key(i))
			if err != nil {
				t.Fatal(err)
			}
			want, wantOK := model[key(i)]
			if ok != wantOK || !bytes.Equal(v, want) {
				t.Fatalf("round %d: Get(%q) = %q, %v; want %q, %v", round, key(i), v, ok, want, wantOK)
			}
		}
	}
	for round := range 40 {
		var muts []protocol.Mutation
		for len(muts) < rng.IntN(400) {
			del := rng.IntN(2) == 0
			for range 1 + rng.IntN(2*rowsPerStmt+3) {
				k := key(rng.IntN(keys))
				if del {
					muts = append(muts, protocol.Mutation{Key: k, Delete: true})
					delete(model, k)
					continue
				}
				v := fmt.Appendf(nil, "r%d-%d", round, rng.IntN(1000))
				if rng.IntN(10) == 0 {
					v = nil // stored as empty
				}
				muts = append(muts, protocol.Mutation{Key: k, Value: v})
				model[k] = append([]byte{}, v...)
			}
		}
		if err := s.Apply(ctx, muts, int64(round), time.Time{}); err != nil {
			t.Fatal(err)
		}
		// The caller's buffers are its own again after Apply.
		for _, m := range muts {
			if m.Value != nil {
				m.Value[0] = 'X'
			}
		}
		check(s, round)
		if round%10 == 9 {
			s.Close()
			s = open(t, path)
			check(s, round)
		}
	}
}

// TestGetReturnsCallersCopy: a value Get returned may be changed by its
// caller without changing what the store holds.
func TestGetReturnsCallersCopy(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "t.db"))
	if err := s.Apply(ctx, []protocol.Mutation{{Key: "a", Value: []byte("abc")}}, 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		v, ok, err := s.Get("a")
		if err != nil || !ok || string(v) != "abc" {
			t.Fatalf("Get(a) = %q, %v, %v; want abc", v, ok, err)
		}
		v[0] = 'X'
	}
}

// TestCacheDroppedOnReset: after Reset nothing read before it is served.
func TestCacheDroppedOnReset(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "t.db"))
	if err := s.Apply(ctx, []protocol.Mutation{{Key: "a", Value: []byte("abc")}}, 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.Get("a"); !ok {
		t.Fatal("a missing")
	}
	if err := s.Reset(ctx, Incarnation{Cluster: "c"}); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := s.Get("a"); err != nil || ok {
		t.Fatalf("Get(a) after Reset = %q, %v, %v; want absent", v, ok, err)
	}
}

// TestCacheBounded: reading more keys than the cache holds keeps it at its
// bound and every value right.
func TestCacheBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 70,000 rows")
	}
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "t.db"))
	n := cacheEntries + 4000
	muts := make([]protocol.Mutation, n)
	for i := range muts {
		muts[i] = protocol.Mutation{Key: fmt.Sprintf("k%06d", i), Value: fmt.Appendf(nil, "%d", i)}
	}
	if err := s.Apply(ctx, muts, 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for pass := range 2 {
		for i := range n {
			v, ok, err := s.Get(muts[i].Key)
			if err != nil || !ok || string(v) != fmt.Sprint(i) {
				t.Fatalf("pass %d: Get(%s) = %q, %v, %v", pass, muts[i].Key, v, ok, err)
			}
		}
		if len(s.cache) > cacheEntries {
			t.Fatalf("cache holds %d entries, bound %d", len(s.cache), cacheEntries)
		}
	}
}
