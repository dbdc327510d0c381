package observer_test

import (
	"context"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/observer"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRunTailsAndPicksUpNewTopics runs the observer as a service: records
// produced after it started are stored, a topic created later that
// matches the pattern is picked up, the store is pruned to its bound, and
// Run returns nil when its context ends.
func TestRunTailsAndPicksUpNewTopics(t *testing.T) {
	ctx := ctxFor(t)
	c := broker.New(t)
	b := builder(t, c)
	if err := b.Create(ctx, 1, "live-a"); err != nil {
		t.Fatal(err)
	}
	st, err := observer.OpenStore(ctx, filepath.Join(t.TempDir(), "obs.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	o, err := observer.New(observer.Config{Brokers: c.Addrs(), Pattern: regexp.MustCompile("^live-"),
		Refresh: 100 * time.Millisecond, PruneEvery: 100 * time.Millisecond, MaxRecords: 3}, st)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- o.Run(rctx) }()

	stored := func(at headers.Coordinate) bool {
		_, err := st.Record(ctx, at)
		return err == nil
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("timed out waiting for %s", what)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	a, err := b.Stamped(ctx, "live-a", 0, &headers.Stamp{})
	if err != nil {
		t.Fatal(err)
	}
	waitFor("a record produced after the start", func() bool { return stored(a) })
	if err := b.Create(ctx, 1, "live-b"); err != nil {
		t.Fatal(err)
	}
	var last headers.Coordinate
	for range 6 {
		if last, err = b.Stamped(ctx, "live-b", 0, &headers.Stamp{}); err != nil {
			t.Fatal(err)
		}
	}
	waitFor("a topic created after the start", func() bool { return stored(last) })
	// A partition added to an observed topic is picked up too.
	if resp, err := c.Admin().CreatePartitions(ctx, 1, "live-b"); err != nil || resp.Error() != nil {
		t.Fatalf("add a partition: %v %v", err, resp.Error())
	}
	fresh, err := c.NewClient(kgo.RecordPartitioner(kgo.ManualPartitioner())) // knows the new partition
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	r := &kgo.Record{Topic: "live-b", Partition: 1, Value: []byte("p1")}
	if err := fresh.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	p1 := b.At("live-b", 1, r.Offset)
	waitFor("a partition added after the start", func() bool { return stored(p1) })
	waitFor("pruning to 3 records", func() bool {
		var n int
		st.DB().QueryRowContext(ctx, `SELECT count(*) FROM records`).Scan(&n)
		return n <= 3
	})
	if !stored(p1) || stored(a) {
		t.Errorf("pruning kept the wrong records: newest stored %v, oldest stored %v", stored(last), stored(a))
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run returned %v after its context ended, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
}
