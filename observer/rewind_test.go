package observer

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFailedBatchIsFetchedAgain: a batch the store refuses is not lost —
// the observer fetches it again from the store's positions, and the store
// holds every record, with no range recorded as skipped.
func TestFailedBatchIsFetchedAgain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	c := broker.New(t, broker.Topics(broker.Topic{Name: "t", Partitions: 1}))
	prod, err := c.NewClient(kgo.DefaultProduceTopic("t"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	produce := func(n int) {
		for range n {
			if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	st, err := OpenStore(ctx, filepath.Join(t.TempDir(), "obs.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	o, err := New(Config{Brokers: c.Addrs(), Topics: []string{"t"}, Logger: slog.New(slog.DiscardHandler)}, st)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	produce(5)
	if err := o.probe(ctx); err != nil {
		t.Fatal(err)
	}
	stored := func() int {
		var n int
		st.db.QueryRow(`SELECT count(*) FROM records`).Scan(&n)
		return n
	}
	for stored() < 5 {
		if _, err := o.poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	produce(5)
	o.mu.Lock()
	o.w.failNext = errors.New("disk full")
	o.mu.Unlock()
	failed := false
	for stored() < 10 && ctx.Err() == nil {
		if _, err := o.poll(ctx); err != nil {
			failed = true
		}
	}
	var gaps int
	st.db.QueryRow(`SELECT count(*) FROM gaps`).Scan(&gaps)
	if !failed || stored() != 10 || gaps != 0 {
		t.Fatalf("after a refused batch: failed %v, %d records stored, %d ranges skipped; want the batch fetched again: 10 and 0", failed, stored(), gaps)
	}
	ch := headers.Channel{Topic: o.topics["t"], Partition: 0}
	for off := range int64(10) {
		if _, err := st.Record(ctx, headers.Coordinate{Channel: ch, Offset: off}); err != nil {
			t.Errorf("record %d: %v", off, err)
		}
	}
}
