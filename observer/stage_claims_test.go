package observer_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/observer"
	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestStagePipelineClaimsOnlyCommittedRecords runs two stages over inputs
// full of aborted transactions and a transaction left open while the
// stages work around it, restarts them (so own outputs are claimed across
// incarnations), and scans everything: no record a stage wrote may claim a
// position that is no committed record (wire constraint 8) — no
// unsettleable-claim finding of any severity on a Parsley-written topic.
func TestStagePipelineClaimsOnlyCommittedRecords(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const app = "claims"
	compact := map[string]*string{"cleanup.policy": ptr("compact")}
	c := broker.New(t, broker.FakeOpts(kfake.GroupMinSessionTimeout(100*time.Millisecond)), broker.Topics(
		broker.Topic{Name: "src", Partitions: 2}, broker.Topic{Name: "mid", Partitions: 2},
		broker.Topic{Name: "side", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2},
		broker.Topic{Name: stage.ChangelogTopic(app, "relay"), Partitions: 2, Configs: compact},
		broker.Topic{Name: stage.ChangelogTopic(app, "tail"), Partitions: 2, Configs: compact}))

	srcT := stage.NewTopic("src", stage.String(), stage.String())
	midT := stage.NewTopic("mid", stage.String(), stage.String())
	sideT := stage.NewTopic("side", stage.String(), stage.String())
	outT := stage.NewTopic("out", stage.String(), stage.String())
	// relay writes every record to mid and every third to side, so side's
	// logs end in commit markers of steps that wrote only mid.
	relay := stage.On(stage.Named("relay"), srcT, func(m stage.Message[string, string]) ([]stage.Emission, error) {
		es := []stage.Emission{midT.Send(m.Key, m.Value)}
		if strings.HasSuffix(m.Value, "0") || strings.HasSuffix(m.Value, "3") || strings.HasSuffix(m.Value, "6") {
			es = append(es, sideT.Send(m.Key, m.Value))
		}
		return es, nil
	}).Into(midT, sideT).MustBuild()
	fwd := func(m stage.Message[string, string]) ([]stage.Emission, error) {
		return []stage.Emission{outT.Send(m.Key, m.Value)}, nil
	}
	tb := stage.On(stage.Named("tail"), midT, fwd)
	tail := stage.On(tb, sideT, fwd).Into(outT).MustBuild()

	dir := t.TempDir()
	start := func() func() {
		a, err := stage.New(stage.Config{
			ApplicationID: app, InstanceID: "i1", Brokers: c.Addrs(), StateDir: filepath.Join(dir, "state"),
			PollInterval: 50 * time.Millisecond, SessionTimeout: 2 * time.Second, RebalanceTimeout: 3 * time.Second,
			TransactionTimeout: 5 * time.Second, RetryBackoff: 50 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		}, relay, tail)
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- a.Run(rctx) }()
		return func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("stage run: %v", err)
			}
		}
	}

	txn, err := c.NewClient(kgo.TransactionalID("src-writer"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	long, err := c.NewClient(kgo.TransactionalID("src-long"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer long.Close()
	out, err := c.NewClient(kgo.ConsumeTopics("out"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()

	want, got, aborted := 0, 0, 0
	expect := func(v string) {
		want++ // mid, then out
		if strings.HasSuffix(v, "0") || strings.HasSuffix(v, "3") || strings.HasSuffix(v, "6") {
			want++ // side, then out
		}
	}
	waitOut := func(n int) {
		t.Helper()
		for got < n {
			fs := out.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("%d of %d out records", got, n)
			}
			got += fs.NumRecords()
		}
	}
	// send writes one record to src partition p in its own transaction of
	// cl, committed or aborted.
	send := func(cl *kgo.Client, p int32, v string, commit bool) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "src", Partition: p, Key: []byte("k" + v), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
		if commit {
			expect(v)
		} else {
			aborted++
		}
	}
	batch := func(from, to int) {
		for i := from; i < to; i++ {
			send(txn, int32(i%2), fmt.Sprint(i), i%4 != 3)
		}
	}

	stop := start()
	batch(0, 12)
	// A transaction stays open on src/0 while src/1 moves on.
	if err := long.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := long.ProduceSync(ctx, &kgo.Record{Topic: "src", Partition: 0, Key: []byte("long"), Value: []byte("long")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitOut(want) // everything before the open transaction
	for i := 101; i < 111; i += 2 {
		send(txn, 1, fmt.Sprint(i), true)
	}
	waitOut(want) // src/1 passed the open transaction's position
	if err := long.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	expect("long")
	batch(12, 20)
	waitOut(want)
	stop()

	// A new incarnation: its first stamps claim the earlier ones' sends.
	stop = start()
	batch(20, 32)
	waitOut(want)
	stop()
	if aborted == 0 {
		t.Fatal("no aborted transactions: the test proves nothing")
	}

	_, o := scanWith(t, ctx, c, observer.Config{})
	stageTopics := map[string]bool{"mid": true, "side": true, "out": true}
	claims := 0
	for _, f := range findings(t, ctx, o) {
		if f.Code == observer.CodeUnsettleableClaim && stageTopics[f.Topic] {
			t.Errorf("a stage wrote an unsettleable claim: %s", f)
			claims++
		} else {
			t.Logf("finding: %s", f)
		}
	}
	t.Logf("%d out records, %d aborted input transactions, %d unsettleable claims by stages", got, aborted, claims)
}

func ptr(s string) *string { return &s }
