package stage_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A handler and a fold are pure functions over values: test them with plain
// equality, no runtime needed.
func ExampleFold() {
	in := stage.NewTopic("words", stage.String(), stage.String())
	out := stage.NewTopic("counts", stage.String(), stage.Int64())
	var count stage.Fold[int64, string, string] = func(n int64, m stage.Message[string, string]) (stage.Step[int64], error) {
		n++
		return stage.Next(n, out.Send(m.Key, n)), nil
	}
	step, _ := count(2, stage.Message[string, string]{Topic: in.Name(), Key: "go", Value: "gopher"})
	fmt.Println(step.State, step.Emissions[0].Topic())
	// Output: 3 counts
}

// Build validates a declaration and reports every problem at once.
func ExampleBuilder_Build() {
	in := stage.NewTopic("in", stage.String(), stage.String())
	h := func(stage.Message[string, string]) ([]stage.Emission, error) { return nil, nil }
	_, err := stage.On(stage.On(stage.Named("upper"), in, h), in, h).Build()
	fmt.Println(err)
	// Output:
	// invalid stage: stage "upper": topic "in" consumed twice
	// invalid stage: stage "upper" has no sinks and no state, so it can have no effect (declare its sinks with Into)
}

// Run a stateful stage against an in-process broker.
func ExampleRun() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := broker.Start(ctx, broker.Topics(
		broker.Topic{Name: "words"}, broker.Topic{Name: "counts"},
		broker.Topic{Name: stage.ChangelogTopic("wordcount", "count"), Configs: map[string]*string{"cleanup.policy": ptr("compact")}},
	))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	words := stage.NewTopic("words", stage.String(), stage.String())
	counts := stage.NewTopic("counts", stage.String(), stage.Int64())
	b := stage.WithState(stage.Named("count"), stage.Int64(), 0)
	stage.OnFold(b, words, func(n int64, m stage.Message[string, string]) (stage.Step[int64], error) {
		n++
		return stage.Next(n, counts.Send(strings.ToLower(m.Value), n)), nil
	})
	count := b.Into(counts).MustBuild()

	dir, _ := os.MkdirTemp("", "wordcount")
	defer os.RemoveAll(dir)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- stage.Run(runCtx, stage.Config{
			ApplicationID: "wordcount", InstanceID: "laptop", Brokers: c.Addrs(), StateDir: dir,
		}, count)
	}()

	for _, w := range []string{"Go", "go", "GO"} {
		c.Client().ProduceSync(ctx, &kgo.Record{Topic: "words", Key: []byte("go"), Value: []byte(w)})
	}
	rd, _ := c.NewClient(kgo.ConsumeTopics("counts"), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	defer rd.Close()
	for seen := 0; seen < 3; {
		rd.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			n, _ := stage.Int64().Decode(r.Value)
			fmt.Println(string(r.Key), n)
			seen++
		})
	}
	stop()
	fmt.Println(<-done)
	// Output:
	// go 1
	// go 2
	// go 3
	// <nil>
}

func ptr[T any](v T) *T { return &v }

// Recovering turns a handler's deterministic domain failures into
// emissions to an error sink, committed with the step.
func ExampleRecovering() {
	orders := stage.NewTopic("orders", stage.String(), stage.Int64())
	shipments := stage.NewTopic("shipments", stage.String(), stage.Int64())
	rejects := stage.NewTopic("rejects", stage.String(), stage.String())
	ship := stage.Recovering(func(m stage.Message[string, int64]) ([]stage.Emission, error) {
		if m.Value <= 0 {
			return nil, fmt.Errorf("quantity %d", m.Value)
		}
		return []stage.Emission{shipments.Send(m.Key, m.Value)}, nil
	}, func(m stage.Message[string, int64], err error) []stage.Emission {
		return []stage.Emission{rejects.Send(m.Key, err.Error())}
	})
	for _, q := range []int64{3, 0} {
		es, _ := ship(stage.Message[string, int64]{Topic: orders.Name(), Key: "o1", Value: q})
		v, _ := es[0].Value()
		fmt.Println(es[0].Topic(), v)
	}
	// Output:
	// shipments 3
	// rejects quantity 0
}
