package view_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/stage"
	"github.com/parsley-go/parsley/view"
	"github.com/twmb/franz-go/pkg/kgo"
)

func ptr[T any](v T) *T { return &v }

// fixture is an embedded broker with a summing stage over two co-partitioned
// inputs, "orders" and "payments", whose state is the per-key total.
type fixture struct {
	c        *broker.Cluster
	app      string
	st       *stage.Stage
	orders   *stage.Topic[string, string]
	payments *stage.Topic[string, string]
}

const stageName = "totals"

func newFixture(t *testing.T, parts int32) *fixture {
	t.Helper()
	app := "views"
	c := broker.New(t, broker.Topics(
		broker.Topic{Name: "orders", Partitions: parts},
		broker.Topic{Name: "payments", Partitions: parts},
		broker.Topic{Name: "totals-out", Partitions: parts},
		broker.Topic{Name: stage.ChangelogTopic(app, stageName), Partitions: parts, Configs: map[string]*string{"cleanup.policy": ptr("compact")}},
	))
	f := &fixture{c: c, app: app,
		orders:   stage.NewTopic("orders", stage.String(), stage.String()),
		payments: stage.NewTopic("payments", stage.String(), stage.String()),
	}
	out := stage.NewTopic("totals-out", stage.String(), stage.Int64())
	b := stage.WithState(stage.Named(stageName), stage.Int64(), 0)
	stage.OnFold(b, f.orders, func(n int64, m stage.Message[string, string]) (stage.Step[int64], error) {
		x, err := strconv.ParseInt(m.Value, 10, 64)
		if err != nil {
			return stage.Step[int64]{}, err
		}
		n += x
		return stage.Next(n, out.Send(m.Key, n)), nil
	})
	stage.OnFold(b, f.payments, func(n int64, m stage.Message[string, string]) (stage.Step[int64], error) {
		x, err := strconv.ParseInt(m.Value, 10, 64)
		if err != nil {
			return stage.Step[int64]{}, err
		}
		n -= x
		return stage.Next(n, out.Send(m.Key, n)), nil
	})
	f.st = b.Into(out).MustBuild()
	return f
}

// run starts the stage; it stops when the test ends.
func (f *fixture) run(t *testing.T) {
	t.Helper()
	t.Cleanup(f.instance(t, "i1"))
}

// instance starts one instance of the stage and returns its stop.
func (f *fixture) instance(t *testing.T, id string) func() {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	dir := t.TempDir()
	go func() {
		done <- stage.Run(ctx, stage.Config{ApplicationID: f.app, InstanceID: id, Brokers: f.c.Addrs(), StateDir: dir,
			SessionTimeout: 6 * time.Second, RebalanceTimeout: 6 * time.Second, LeaveOnShutdown: true}, f.st)
	}()
	var once bool
	return func() {
		if once {
			return
		}
		once = true
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("stage.Run %s: %v", id, err)
		}
	}
}

// startView runs a view of the stage; it stops when the test ends.
func (f *fixture) startView(t *testing.T, opts ...kgo.Opt) *view.View[string, int64] {
	t.Helper()
	v, err := view.New(view.Config{ApplicationID: f.app, Stage: stageName, Brokers: f.c.Addrs(), ClientOpts: opts}, stage.String(), stage.Int64())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- v.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("view.Run: %v", err)
		}
	})
	return v
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// A read with the token of a write never returns state older than the
// write: every GetAfter sees the sum of every order the writer placed for
// that key so far, exactly.
func TestTokenReadNeverStale(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t, 3)
	f.run(t)
	v := f.startView(t)
	if err := v.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	clk := clock.New(f.c.Admin())
	defer clk.Close()
	want := map[string]int64{}
	stale := 0
	for i := range 60 {
		key := "k" + strconv.Itoa(i%7)
		rec := &kgo.Record{Topic: "orders", Key: []byte(key), Value: []byte(strconv.Itoa(i + 1))}
		if err := clk.Stamp(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if err := f.c.Client().ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := clk.RecordProduced(rec); err != nil {
			t.Fatal(err)
		}
		want[key] += int64(i + 1)
		tok := view.TokenOf(clk.Snapshot())
		got, ok, err := v.GetAfter(ctx, tok, key)
		if err != nil {
			t.Fatalf("GetAfter(%s): %v", key, err)
		}
		if !ok || got != want[key] {
			stale++
			t.Errorf("write %d: GetAfter(%q) = %d, %v; want %d", i, key, got, ok, want[key])
		}
	}
	if stale > 0 {
		t.Fatalf("%d of 60 token reads stale", stale)
	}
	if n := v.Len(); n != 7 {
		t.Errorf("Len = %d, want 7", n)
	}
	seen := map[string]int64{}
	for e, err := range v.All() {
		if err != nil {
			t.Fatal(err)
		}
		seen[e.Key] = e.State
	}
	for k, w := range want {
		if seen[k] != w {
			t.Errorf("All: %s = %d, want %d", k, seen[k], w)
		}
	}
}

// GetAfter waits while the owning task has not delivered the token, and
// its error on an expired context names the channel and offset it waits
// for and where the record is: held in the gate (a payment whose order is
// in an open transaction) or not yet fetched (that order).
func TestGetAfterWaitsAndSaysForWhat(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t, 1)
	f.run(t)
	v := f.startView(t)
	clk := clock.New(f.c.Admin())
	defer clk.Close()

	txn, err := f.c.NewClient(kgo.TransactionalID("order-writer"))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	order := &kgo.Record{Topic: "orders", Key: []byte("o1"), Value: []byte("100")}
	if err := clk.Stamp(ctx, order); err != nil {
		t.Fatal(err)
	}
	if err := txn.ProduceSync(ctx, order).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := clk.RecordProduced(order); err != nil {
		t.Fatal(err)
	}
	pay := &kgo.Record{Topic: "payments", Key: []byte("o1"), Value: []byte("30")}
	if err := clk.Stamp(ctx, pay); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Client().ProduceSync(ctx, pay).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := clk.RecordProduced(pay); err != nil {
		t.Fatal(err)
	}
	tok := view.TokenOf(clk.Snapshot())
	ordersID, err := f.c.TopicID(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	paymentsID, err := f.c.TopicID(ctx, "payments")
	if err != nil {
		t.Fatal(err)
	}

	// Until the order commits, no read with the token may return: wait
	// until the task has committed the payment's hold, checking each
	// expired read's error.
	var we *view.WaitError
	for {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		got, ok, err := v.GetAfter(short, tok, "o1")
		cancel()
		if ctx.Err() != nil {
			t.Fatalf("the payment was never held: last error %v", err)
		}
		if err == nil {
			t.Fatalf("GetAfter returned %d, %v while the order's transaction is open", got, ok)
		}
		if errors.Is(err, view.ErrNotRunning) {
			continue
		}
		if !errors.As(err, &we) || !errors.Is(err, view.ErrNotYet) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("GetAfter error %v (%T): want a *WaitError wrapping ErrNotYet and the deadline", err, err)
		}
		var payHeld bool
		for _, a := range we.Awaiting {
			if a.Channel.Topic == paymentsID && a.Offset == pay.Offset && a.Held {
				payHeld = true
			}
		}
		if payHeld {
			break
		}
	}
	if len(we.Awaiting) != 2 {
		t.Fatalf("awaiting %v, want the order and the payment", we.Awaiting)
	}
	for _, a := range we.Awaiting {
		if a.Channel.Topic == ordersID && a.Held {
			t.Errorf("the order in an open transaction is reported held: %v", a)
		}
	}
	msg := we.Error()
	for _, want := range []string{
		fmt.Sprintf("%s/0 offset %d (not yet fetched", headers.TopicID(ordersID), order.Offset),
		fmt.Sprintf("%s/0 offset %d (held in the gate", headers.TopicID(paymentsID), pay.Offset),
		`"o1"`,
	} {
		if !contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}

	// Commit the order: the read returns, with both records applied.
	done := make(chan error, 1)
	var got int64
	go func() {
		var err error
		got, _, err = v.GetAfter(ctx, tok, "o1")
		done <- err
	}()
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got != 70 {
		t.Fatalf("GetAfter after the commit = %d, want 70", got)
	}
}

func contains(s, sub string) bool { return len(sub) == 0 || indexOf(s, sub) >= 0 }

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// A claim on a channel the owning task does not consume is not waited for
// (the task never delivers it); claims on its own channels still are.
func TestTokenClaimsOutsideScopeIgnored(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t, 2)
	f.run(t)
	v := f.startView(t)
	clk := clock.New(f.c.Admin())
	defer clk.Close()
	rec := &kgo.Record{Topic: "orders", Key: []byte("x"), Value: []byte("4")}
	if err := clk.Stamp(ctx, rec); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Client().ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := clk.RecordProduced(rec); err != nil {
		t.Fatal(err)
	}
	c := clk.Snapshot()
	other, err := f.c.TopicID(ctx, "totals-out") // not an input of the stage
	if err != nil {
		t.Fatal(err)
	}
	c.SetOffset(headers.Channel{Topic: other, Partition: 0}, 1<<40)
	ordersID, _ := f.c.TopicID(ctx, "orders")
	c.SetOffset(headers.Channel{Topic: ordersID, Partition: 1 - rec.Partition}, 1<<40) // the other task's partition
	got, ok, err := v.GetAfter(ctx, view.TokenOf(c), "x")
	if err != nil || !ok || got != 4 {
		t.Fatalf("GetAfter = %d, %v, %v; want 4 without waiting for channels the task does not consume", got, ok, err)
	}
	// A claim on the task's own channel past what was written waits.
	c.SetOffset(headers.Channel{Topic: ordersID, Partition: rec.Partition}, rec.Offset+1)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, _, err := v.GetAfter(short, view.TokenOf(c), "x"); !errors.Is(err, view.ErrNotYet) {
		t.Fatalf("GetAfter with an undelivered own claim = %v, want ErrNotYet", err)
	}
}

// Token reads stay fresh, and a key's state never goes back, while tasks
// move: a second instance joins (a rebalance), then the first leaves (its
// tasks restore on the second).
func TestTokenReadsAcrossRebalance(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t, 4)
	stopA := f.instance(t, "a")
	defer stopA()
	v := f.startView(t)
	clk := clock.New(f.c.Admin())
	defer clk.Close()
	want := map[string]int64{}
	last := map[string]int64{}
	var stopB func()
	for i := range 90 {
		switch i {
		case 30:
			stopB = f.instance(t, "b")
			defer stopB()
		case 60:
			stopA()
		}
		key := "k" + strconv.Itoa(i%9)
		tok := write(ctx, t, f, clk, key, 1)
		want[key]++
		got, _, err := v.GetAfter(ctx, tok, key)
		if err != nil {
			t.Fatalf("write %d: GetAfter(%s): %v", i, key, err)
		}
		if got != want[key] {
			t.Fatalf("write %d: GetAfter(%s) = %d, want %d", i, key, got, want[key])
		}
		for k := range want {
			g, _, err := v.Get(k)
			if err != nil {
				t.Fatal(err)
			}
			if g < last[k] {
				t.Fatalf("write %d: %s went back from %d to %d", i, k, last[k], g)
			}
			last[k] = g
		}
	}
}
