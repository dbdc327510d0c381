package state

import (
	"bytes"
	"context"
	"errors"
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

// TestCacheBounded: reading more than the cache holds keeps it within its
// byte bound and every value right, read one by one and prefetched.
func TestCacheBounded(t *testing.T) {
	ctx := context.Background()
	const limit = 64 << 10
	s, err := Open(ctx, filepath.Join(t.TempDir(), "t.db"), CacheBytes(limit))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	n := 5000 // about 130 bytes each with the overhead: ten times the bound
	muts := make([]protocol.Mutation, n)
	keys := make([]string, n)
	for i := range muts {
		keys[i] = fmt.Sprintf("k%06d", i)
		muts[i] = protocol.Mutation{Key: keys[i], Value: fmt.Appendf(nil, "%d", i)}
	}
	if err := s.Apply(ctx, muts, 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	for pass := range 3 {
		if pass == 2 {
			if err := s.Prefetch(ctx, append(keys, "absent")); err != nil {
				t.Fatal(err)
			}
		}
		for i := range n {
			v, ok, err := s.Get(muts[i].Key)
			if err != nil || !ok || string(v) != fmt.Sprint(i) {
				t.Fatalf("pass %d: Get(%s) = %q, %v, %v", pass, muts[i].Key, v, ok, err)
			}
		}
		if s.cache.used > limit || s.cache.len() == 0 {
			t.Fatalf("pass %d: cache holds %d entries, %d bytes; bound %d", pass, s.cache.len(), s.cache.used, limit)
		}
	}
}

// TestPrefetchMatchesModel: after random Applies, a Prefetch of present,
// absent, repeated and more than readsPerStmt keys makes Get answer as the
// file does, and a later Apply updates what it fetched.
func TestPrefetchMatchesModel(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "t.db"))
	rng := rand.New(rand.NewPCG(3, 4))
	model := map[string][]byte{}
	key := func(i int) string { return fmt.Sprintf("\x02k%04d", i) }
	const keys = 1000
	for round := range 20 {
		var muts []protocol.Mutation
		for range rng.IntN(300) {
			k := key(rng.IntN(keys))
			if rng.IntN(3) == 0 {
				muts = append(muts, protocol.Mutation{Key: k, Delete: true})
				delete(model, k)
				continue
			}
			v := fmt.Appendf(nil, "r%d", round)
			muts = append(muts, protocol.Mutation{Key: k, Value: v})
			model[k] = v
		}
		if err := s.Apply(ctx, muts, int64(round), time.Time{}); err != nil {
			t.Fatal(err)
		}
		var want []string
		for range rng.IntN(3 * readsPerStmt) {
			want = append(want, key(rng.IntN(keys)))
		}
		if err := s.Prefetch(ctx, want); err != nil {
			t.Fatal(err)
		}
		for _, k := range want {
			if !s.cache.has(k) && s.mayHold(k) {
				t.Fatalf("round %d: %q prefetched but neither cached nor ruled out by the filter", round, k)
			}
			v, ok, err := s.Get(k)
			w, wok := model[k]
			if err != nil || ok != wok || !bytes.Equal(v, w) {
				t.Fatalf("round %d: Get(%q) = %q, %v, %v; want %q, %v", round, k, v, ok, err, w, wok)
			}
		}
	}
}

// TestFailedApplyNotServed: the values of an Apply that did not commit —
// an aborted or unknown commit — are never served, though the keys were
// cached before it: reads answer the committed values. (Checked by
// breaking it: with the cache updated before SQLite's commit and not
// dropped on failure, this test fails serving "aborted".)
func TestFailedApplyNotServed(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "t.db"))
	if err := s.Apply(ctx, []protocol.Mutation{{Key: "a", Value: []byte("committed")}}, 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Prefetch(ctx, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	s.beforeCommit = func() error { return boom }
	err := s.Apply(ctx, []protocol.Mutation{{Key: "a", Value: []byte("aborted")}, {Key: "b", Value: []byte("aborted")}}, 2, time.Time{})
	if !errors.Is(err, boom) {
		t.Fatalf("Apply = %v, want boom", err)
	}
	s.beforeCommit = nil
	if v, ok, err := s.Get("a"); err != nil || !ok || string(v) != "committed" {
		t.Fatalf("Get(a) = %q, %v, %v; want committed", v, ok, err)
	}
	if v, ok, err := s.Get("b"); err != nil || ok {
		t.Fatalf("Get(b) = %q, %v, %v; want absent", v, ok, err)
	}
	if s.Checkpoint() != 1 {
		t.Fatalf("checkpoint %d after a failed Apply, want 1", s.Checkpoint())
	}
}
