package state

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kgo"
)

// foldWrite is what a fold over payments writes for account i: its key
// and its total, JSON-encoded.
func foldWrite(i int) protocol.Mutation {
	return protocol.Mutation{Key: "\x02acct-" + strconv.Itoa(i), Value: []byte(`{"Sum":` + strconv.Itoa(100+i%9900) + `}`)}
}

// timeIntoEmptyStores runs fill on a new store each iteration, timing fill
// alone, and reports keys/s.
func timeIntoEmptyStores(b *testing.B, keys int, fill func(*Store)) {
	var total time.Duration
	for b.Loop() {
		b.StopTimer()
		s, err := Open(context.Background(), filepath.Join(b.TempDir(), "t.db"))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		fill(s)
		total += time.Since(t0)
		b.StopTimer()
		var n int
		if err := s.db.QueryRow("SELECT count(*) FROM kv").Scan(&n); err != nil || n != keys {
			b.Fatalf("store holds %d keys, %v; want %d", n, err, keys)
		}
		s.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(keys*b.N)/total.Seconds(), "keys/s")
}

// BenchmarkApplyNewKeys is the write a fold over new keys makes: batches of
// 65,536 keys never written before, each sorted (as a task writes its
// unwritten steps), into a file that grows to 1,048,576 rows.
func BenchmarkApplyNewKeys(b *testing.B) {
	const keys, batch = 1 << 20, 1 << 16
	var batches [][]protocol.Mutation
	for i := 0; i < keys; i += batch {
		muts := make([]protocol.Mutation, 0, batch)
		for j := i; j < min(i+batch, keys); j++ {
			muts = append(muts, foldWrite(j))
		}
		protocol.SortMutations(muts)
		batches = append(batches, muts)
	}
	timeIntoEmptyStores(b, keys, func(s *Store) {
		for i, muts := range batches {
			if err := s.Apply(context.Background(), muts, int64(i+1), time.Now()); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRestore restores a changelog written as a fold over new keys
// writes it: transactions of 2,000 keys, sorted within each (a step's
// writes), spread over the key space, into an empty store.
// PARSLEY_RESTORE_BENCH_KEYS sets the keys (default 200,000).
func BenchmarkRestore(b *testing.B) {
	keys := 200_000
	if s := os.Getenv("PARSLEY_RESTORE_BENCH_KEYS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			b.Fatalf("PARSLEY_RESTORE_BENCH_KEYS=%q: want a positive integer", s)
		}
		keys = n
	}
	ctx := context.Background()
	l := newChangelog(b, map[string]*string{"cleanup.policy": ptr("delete")})
	const step = 2000
	perm := rand.New(rand.NewPCG(1, 2)).Perm(keys)
	for i := 0; i < keys; i += step {
		var muts []protocol.Mutation
		for _, j := range perm[i:min(i+step, keys)] {
			muts = append(muts, foldWrite(j))
		}
		protocol.SortMutations(muts)
		l.commit(ctx, time.Now(), muts...)
	}
	newClient := func(opts ...kgo.Opt) (*kgo.Client, error) { return l.c.NewClient(opts...) }
	timeIntoEmptyStores(b, keys, func(s *Store) {
		if _, err := Restore(ctx, l.c.Admin(), newClient, "cl", 0, s, nil); err != nil {
			b.Fatal(err)
		}
	})
}
