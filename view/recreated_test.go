package view_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/state"
	"github.com/parsley-go/parsley/stage"
	"github.com/parsley-go/parsley/view"
	"github.com/twmb/franz-go/pkg/kgo"
)

// commitState writes one key's state into the changelog in a committed
// transaction, as a task would.
func commitState(ctx context.Context, t *testing.T, f *fixture, key string, n int64) {
	t.Helper()
	cl, err := f.c.NewClient(kgo.TransactionalID("views-test-"+key), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	b, _ := stage.Int64().Encode(n)
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	r := &kgo.Record{Topic: stage.ChangelogTopic(f.app, stageName), Key: []byte(state.FoldKey([]byte(key))), Value: b}
	if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
}

// A changelog deleted and created again while a view runs stops Run with
// a *RecreatedError naming the topic and both topic IDs, without waiting
// for the next Run; the next Run starts over from the new topic instead of
// applying its offsets to the old one's state.
func TestChangelogRecreatedWhileRunning(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t, 1)
	topic := stage.ChangelogTopic(f.app, stageName)
	commitState(ctx, t, f, "k", 5)
	was, err := f.c.TopicID(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	v, err := view.New(view.Config{ApplicationID: f.app, Stage: stageName, Brokers: f.c.Addrs()}, stage.String(), stage.Int64())
	if err != nil {
		t.Fatal(err)
	}
	view.SetIncarnationCheck(v, 50*time.Millisecond)
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- v.Run(runCtx) }()
	if err := v.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if n, ok, err := v.Get("k"); err != nil || !ok || n != 5 {
		t.Fatalf("Get(k) = %d, %v, %v; want 5", n, ok, err)
	}
	if err := f.c.DeleteTopics(ctx, topic); err != nil {
		t.Fatal(err)
	}
	if err := f.c.CreateTopics(ctx, broker.Topic{Name: topic, Partitions: 1, Configs: map[string]*string{"cleanup.policy": ptr("compact")}}); err != nil {
		t.Fatal(err)
	}
	var re *view.RecreatedError
	select {
	case err := <-done:
		if !errors.Is(err, view.ErrChangelogRecreated) || !errors.As(err, &re) {
			t.Fatalf("Run = %v, want a *RecreatedError", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run went on after its changelog was recreated")
	}
	now, err := f.c.TopicID(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if re.Topic != topic || re.Was != headers.TopicID(was) || (!re.Now.IsZero() && re.Now != headers.TopicID(now)) {
		t.Errorf("RecreatedError = %+v; want topic %s, was %s, now %s or zero", re, topic, headers.TopicID(was), headers.TopicID(now))
	}
	t.Log(re)

	// The next Run follows the new topic from its start.
	commitState(ctx, t, f, "j", 7)
	go func() { done <- v.Run(runCtx) }()
	if err := v.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if n, ok, err := v.Get("j"); err != nil || !ok || n != 7 {
		t.Errorf("Get(j) = %d, %v, %v; want 7 from the new topic", n, ok, err)
	}
	if _, ok, err := v.Get("k"); err != nil || ok {
		t.Errorf("Get(k) = %v, %v; want no state: the new topic holds none", ok, err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v", err)
	}
}
