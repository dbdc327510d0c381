package view

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/state"
	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkGet: a lookup in a replica of 100,000 keys over 4 partitions,
// from 1 and from GOMAXPROCS goroutines; it reports the p99 of single
// lookups (timed one by one) as p99-ns.
func BenchmarkGet(b *testing.B) {
	v, err := New(Config{ApplicationID: "a", Stage: "s", Brokers: []string{"127.0.0.1:1"}}, stage.String(), stage.Int64())
	if err != nil {
		b.Fatal(err)
	}
	const keys, parts = 100_000, 4
	v.nparts = parts
	for p := range int32(parts) {
		v.parts[p] = newReplica(0)
		v.parts[p].ready = true
	}
	names := make([]string, keys)
	for i := range keys {
		names[i] = "customer-" + strconv.Itoa(i)
		val, _ := stage.Int64().Encode(int64(i))
		r := v.parts[v.owner([]byte(names[i]))]
		r.kv[state.FoldKey([]byte(names[i]))] = val
		r.folds++
	}
	v.running = true
	b.Run("serial", func(b *testing.B) {
		lat := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			t0 := time.Now()
			if _, ok, err := v.Get(names[i%keys]); err != nil || !ok {
				b.Fatal(ok, err)
			}
			lat = append(lat, time.Since(t0))
			i += 7919
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				if _, ok, err := v.Get(names[i%keys]); err != nil || !ok {
					b.Error(ok, err)
					return
				}
				i += 7919
			}
		})
	})
}

// BenchmarkApplyVsRestore: the same changelog (200,000 records in
// transactions of 500, over 20,000 keys) applied by a view from its start
// and restored by a task's store (state.Restore into a new file), in the
// same run on the same broker. It reports each as records/s, and their
// ratio (view over restore) as view/restore.
func BenchmarkApplyVsRestore(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	topic := stage.ChangelogTopic("bench", "s")
	c := broker.New(b, broker.Topics(broker.Topic{Name: topic, Configs: map[string]*string{"cleanup.policy": ptr("compact")}}))
	cl, err := c.NewClient(kgo.TransactionalID("bench-writer"), kgo.DefaultProduceTopic(topic))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	const records, perTxn, keys = 200_000, 500, 20_000
	for t := 0; t < records/perTxn; t++ {
		if err := cl.BeginTransaction(); err != nil {
			b.Fatal(err)
		}
		rs := make([]*kgo.Record, perTxn)
		for i := range rs {
			n := t*perTxn + i
			val, _ := stage.Int64().Encode(int64(n))
			rs[i] = &kgo.Record{Key: []byte(state.FoldKey([]byte("key-" + strconv.Itoa(n%keys)))), Value: val}
		}
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			b.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			b.Fatal(err)
		}
	}
	var viewTime, restoreTime time.Duration
	for b.Loop() {
		// The view, from the changelog's start until ready.
		v, err := New(Config{ApplicationID: "bench", Stage: "s", Brokers: c.Addrs()}, stage.String(), stage.Int64())
		if err != nil {
			b.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		t0 := time.Now()
		go func() { done <- v.Run(rctx) }()
		if err := v.WaitReady(ctx); err != nil {
			b.Fatal(err)
		}
		viewTime += time.Since(t0)
		stop()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			b.Fatal(err)
		}
		if v.Len() != keys {
			b.Fatalf("view holds %d keys, want %d", v.Len(), keys)
		}

		// A task's restore of the same partition into a new file.
		st, err := state.Open(ctx, filepath.Join(b.TempDir(), "task.db"))
		if err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		res, err := state.Restore(ctx, c.Admin(), c.NewClient, topic, 0, st, time.Now)
		restoreTime += time.Since(t0)
		st.Close()
		if err != nil {
			b.Fatal(err)
		}
		if res.Records != records {
			b.Fatalf("restore read %d records, want %d", res.Records, records)
		}
	}
	n := float64(b.N)
	b.ReportMetric(records*n/viewTime.Seconds(), "view-rec/s")
	b.ReportMetric(records*n/restoreTime.Seconds(), "restore-rec/s")
	b.ReportMetric(restoreTime.Seconds()/viewTime.Seconds(), "view/restore")
}

func ptr[T any](v T) *T { return &v }
