package bridge

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/stage"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSinkInsideAStage: one stage forwards "events" to JetStream and turns
// "orders" into Kafka records, in the same steps. The first step that has
// publishes fails to settle after its acknowledgements; it is redone, and
// both the stream and the Kafka output end with every record once.
func TestSinkInsideAStage(t *testing.T) {
	e := newEnv(t, 1, "events", "orders", "out")
	if err := e.kafka.CreateTopics(context.Background(), broker.Topic{Name: ChangelogTopic("grp", "mixed"), Configs: compact}); err != nil {
		t.Fatal(err)
	}
	bc := e.config("events")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sink, err := NewSink(ctx, bc.SinkConfig)
	if err != nil {
		t.Fatal(err)
	}
	defer sink.Close()
	failed := false
	h := &hooked{}
	h.after = func() error {
		if !failed && testutil.ToFloat64(sink.p.m.published) > 0 {
			failed = true
			return errors.New("injected: acknowledged but not committed")
		}
		return nil
	}
	events := stage.NewTopic("events", stage.Bytes(), stage.Bytes())
	orders := stage.NewTopic("orders", stage.String(), stage.String())
	out := stage.NewTopic("out", stage.String(), stage.String())
	b := forwardHooked(stage.Named("mixed"), events, sink, h)
	stage.On(b, orders, func(m stage.Message[string, string]) ([]stage.Emission, error) {
		return []stage.Emission{out.Send(m.Key, "seen "+m.Value)}, nil
	})
	st, err := b.Into(out).Build()
	if err != nil {
		t.Fatal(err)
	}
	var want, wantOut []string
	for i := range 10 {
		e.produce(rec("events", 0, "k", fmt.Sprintf("e%d", i)), rec("orders", 0, "k", fmt.Sprintf("o%d", i)))
		want = append(want, fmt.Sprintf("events/0@%d", i))
		wantOut = append(wantOut, fmt.Sprintf("seen o%d", i))
	}
	app, err := stage.New(stage.Config{
		ApplicationID: "grp", InstanceID: "i1", Brokers: e.kafka.Addrs(), StateDir: filepath.Join(e.dir, "mixed"),
		PollInterval: 50 * time.Millisecond, SessionTimeout: 2 * time.Second, RebalanceTimeout: 3 * time.Second,
		TransactionTimeout: 10 * time.Second, RetryBackoff: 50 * time.Millisecond, Logger: testLogger(),
	}, st)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(rctx) }()
	waitFor(t, 30*time.Second, "every event in the stream", func() bool { return len(e.streamMsgs(testStream)) >= len(want) })
	gotOut := readCommitted(t, e, "out", len(wantOut))
	waitFor(t, 30*time.Second, "a committed step", func() bool { return app.CommittedSteps() > 0 })
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkExactlyOnceInOrder(t, e.streamMsgs(testStream), want)
	sort.Strings(gotOut)
	sort.Strings(wantOut)
	if !slices.Equal(gotOut, wantOut) {
		t.Fatalf("out = %q, want %q", gotOut, wantOut)
	}
	if !failed {
		t.Fatal("the injected failure never happened")
	}
}

// readCommitted reads topic, read_committed, until it has want records,
// then for a moment longer to catch extras.
func readCommitted(t *testing.T, e *env, topic string, want int) []string {
	t.Helper()
	cl, err := e.kafka.NewClient(kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []string
	deadline := time.Now().Add(30 * time.Second)
	var extra time.Time
	for time.Now().Before(deadline) {
		if len(got) >= want && extra.IsZero() {
			extra = time.Now().Add(300 * time.Millisecond)
		}
		if !extra.IsZero() && time.Now().After(extra) {
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
		cancel()
	}
	return got
}
