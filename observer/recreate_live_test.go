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

// TestRunFollowsARecreatedTopic: while the observer runs, a topic is
// deleted and recreated; the new incarnation's records are stored under
// its new topic ID.
func TestRunFollowsARecreatedTopic(t *testing.T) {
	ctx := ctxFor(t)
	c := broker.New(t)
	b := builder(t, c)
	if err := b.Create(ctx, 1, "re"); err != nil {
		t.Fatal(err)
	}
	old, err := b.Stamped(ctx, "re", 0, &headers.Stamp{})
	if err != nil {
		t.Fatal(err)
	}
	st, err := observer.OpenStore(ctx, filepath.Join(t.TempDir(), "obs.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	o, err := observer.New(observer.Config{Brokers: c.Addrs(), Pattern: regexp.MustCompile("^re$"), Refresh: 100 * time.Millisecond}, st)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- o.Run(rctx) }()
	defer func() { cancel(); <-done }()
	wait := func(what string, at headers.Coordinate) {
		t.Helper()
		for {
			if _, err := st.Record(ctx, at); err == nil {
				return
			}
			select {
			case <-ctx.Done():
				cs, _ := st.Channels(context.Background())
				t.Fatalf("timed out waiting for %s %s; channels %+v", what, at, cs)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	wait("the first incarnation's record", old)
	if err := c.DeleteTopics(ctx, "re"); err != nil {
		t.Fatal(err)
	}
	if err := b.Create(ctx, 1, "re"); err != nil {
		t.Fatal(err)
	}
	prod, err := c.NewClient(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	hs, _ := headers.AppendStamp([]kgo.RecordHeader(nil), &headers.Stamp{}, headers.DialectVC)
	r := &kgo.Record{Topic: "re", Value: []byte("new"), Headers: hs}
	if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	wait("the new incarnation's record", b.At("re", 0, r.Offset))
}
