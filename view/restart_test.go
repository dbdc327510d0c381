package view_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/stage"
	"github.com/parsley-go/parsley/view"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runView runs a view with a state directory until stop is called.
func (f *fixture) runView(t *testing.T, dir string) (*view.View[string, int64], func()) {
	t.Helper()
	v, err := view.New(view.Config{ApplicationID: f.app, Stage: stageName, Brokers: f.c.Addrs(), StateDir: dir}, stage.String(), stage.Int64())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- v.Run(ctx) }()
	return v, func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("view.Run: %v", err)
		}
	}
}

// write places orders of amount 1 for key and returns the writer's token.
func write(ctx context.Context, t *testing.T, f *fixture, clk *clock.Clock, key string, n int) view.Token {
	t.Helper()
	for range n {
		rec := &kgo.Record{Topic: "orders", Key: []byte(key), Value: []byte("1")}
		if err := clk.Stamp(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if err := f.c.Client().ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := clk.RecordProduced(rec); err != nil {
			t.Fatal(err)
		}
	}
	return view.TokenOf(clk.Snapshot())
}

// A view with a state directory restarts from its file: it replays only
// the changelog's tail, and answers as a full replay would.
func TestRestartFromStateFile(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t, 1)
	f.run(t)
	dir := t.TempDir()
	clk := clock.New(f.c.Admin())
	defer clk.Close()

	v1, stop1 := f.runView(t, dir)
	for i := range 20 {
		tok := write(ctx, t, f, clk, "k"+strconv.Itoa(i%4), 1)
		if _, _, err := v1.GetAfter(ctx, tok, "k"+strconv.Itoa(i%4)); err != nil {
			t.Fatal(err)
		}
	}
	if s := v1.Status()[0]; s.Wiped && s.WipeReason != "" && s.RestoreRecords != 0 {
		t.Fatalf("a new file's first restore: %+v", s)
	}
	stop1()
	tok := write(ctx, t, f, clk, "k0", 3)
	// The steps of these writes are in the changelog before the restart,
	// so its restore, not its tail, has to read them.
	full := f.startView(t)
	if _, _, err := full.GetAfter(ctx, tok, "k0"); err != nil {
		t.Fatal(err)
	}

	v2, stop2 := f.runView(t, dir)
	defer stop2()
	got, ok, err := v2.GetAfter(ctx, tok, "k0")
	if err != nil || !ok || got != 8 {
		t.Fatalf("after the restart GetAfter(k0) = %d, %v, %v; want 8", got, ok, err)
	}
	for i := 1; i < 4; i++ {
		if got, _, _ := v2.Get("k" + strconv.Itoa(i)); got != 5 {
			t.Errorf("after the restart k%d = %d, want 5", i, got)
		}
	}
	s := v2.Status()[0]
	if s.Wiped {
		t.Fatalf("the restarted view's file was wiped: %s", s.WipeReason)
	}
	// The changelog holds every record of 20 steps or so; the restart
	// read only what the 3 later writes' steps added.
	if end := full.Status()[0].Applied; s.RestoreRecords == 0 || s.RestoreRecords >= end/2 {
		t.Fatalf("the restart's restore read %d records of a changelog ending at %d: not only the tail", s.RestoreRecords, end)
	}
}

// A file that mirrors another changelog — here another cluster's, as every
// embedded broker is a new one — is wiped, never served.
func TestStateFileOfAnotherClusterIsWiped(t *testing.T) {
	ctx := testCtx(t)
	dir := t.TempDir()
	a := newFixture(t, 1)
	a.run(t)
	clk := clock.New(a.c.Admin())
	defer clk.Close()
	va, stopA := a.runView(t, dir)
	tok := write(ctx, t, a, clk, "k", 2)
	if got, _, err := va.GetAfter(ctx, tok, "k"); err != nil || got != 2 {
		t.Fatalf("GetAfter = %d, %v", got, err)
	}
	stopA()

	b := newFixture(t, 1) // same names, a new cluster, an empty changelog
	vb, stopB := b.runView(t, dir)
	defer stopB()
	if err := vb.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if got, ok, err := vb.Get("k"); err != nil || ok {
		t.Fatalf("Get(k) on the new cluster = %d, %v, %v: the other cluster's state was served", got, ok, err)
	}
	if s := vb.Status()[0]; !s.Wiped {
		t.Fatalf("the other cluster's file was not wiped: %+v", s)
	}
}

// A view run again after its Run returned goes on from what it holds: its
// applied offsets and its state never go back.
func TestRunAgainGoesOn(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t, 1)
	f.run(t)
	clk := clock.New(f.c.Admin())
	defer clk.Close()
	v, err := view.New(view.Config{ApplicationID: f.app, Stage: stageName, Brokers: f.c.Addrs()}, stage.String(), stage.Int64())
	if err != nil {
		t.Fatal(err)
	}
	start := func() func() {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- v.Run(rctx) }()
		return func() {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Run: %v", err)
			}
		}
	}
	stop := start()
	tok := write(ctx, t, f, clk, "k", 5)
	if got, _, err := v.GetAfter(ctx, tok, "k"); err != nil || got != 5 {
		t.Fatalf("GetAfter = %d, %v", got, err)
	}
	before := v.Status()[0].Applied
	stop()
	stop = start()
	defer stop()
	for !v.Ready() {
		if s := v.Status(); len(s) > 0 && s[0].Applied < before {
			t.Fatalf("the second Run went back from offset %d to %d", before, s[0].Applied)
		}
		if got, ok, _ := v.Get("k"); !ok || got != 5 {
			t.Fatalf("the second Run went back: k = %d, %v", got, ok)
		}
		if ctx.Err() != nil {
			t.Fatal("never ready")
		}
	}
	tok = write(ctx, t, f, clk, "k", 1)
	if got, _, err := v.GetAfter(ctx, tok, "k"); err != nil || got != 6 {
		t.Fatalf("GetAfter after the second Run = %d, %v", got, err)
	}
}
