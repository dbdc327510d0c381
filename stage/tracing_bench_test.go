package stage

import (
	"context"
	"fmt"
	"testing"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// feedHarness is one task fed directly, without a broker: a node over one
// source and a handler that emits nothing, so each record goes fetch →
// gate → delivery → handler, the step path's hooks all consulted. tp nil
// is tracing off.
func feedHarness(tb testing.TB, tp trace.TracerProvider) (*task, []*kgo.Record) {
	tb.Helper()
	in := NewTopic("in", Bytes(), Bytes()) // no codec allocation: the path itself is measured
	st := On(Named("bench"), in, func(Message[[]byte, []byte]) ([]Emission, error) { return nil, nil }).Into(NewTopic("out", Bytes(), Bytes())).MustBuild()
	id := headers.TopicID{0x11}
	ch := headers.Channel{Topic: id}
	batch := protocol.NewBatch(protocol.NewMemStore())
	node, err := protocol.New(context.Background(), protocol.Config{
		ApplicationID: "bench", Stage: "bench", Inputs: []headers.Channel{ch}, Store: batch, Offsets: noOffsets{},
	})
	if err != nil {
		tb.Fatal(err)
	}
	env := &taskEnv{
		topics: map[string]topicMeta{"in": {id: id, partitions: 1}},
		names:  map[headers.TopicID]string{id: "in"},
		scope:  &scopeWarnings{}, log: testLogger(),
	}
	t := &task{env: env, st: st, node: node, byID: map[headers.TopicID]*binding{id: &st.sources[0]}}
	t.store.batch, t.store.clNext = batch, -1
	if tp != nil {
		cfg := Config{TracerProvider: tp, ApplicationID: "bench"}.WithDefaults()
		env.tracing = newTracing(&cfg)
		t.tr = env.tracing.forTask("bench", 0, env.names)
	}
	recs := make([]*kgo.Record, 500)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "in", Key: fmt.Appendf(nil, "k%d", i%64), Value: []byte("a value of a realistic size, padded out")}
	}
	return t, recs
}

// feedStep feeds one 500-record step at offset base and commits it.
func feedStep(tb testing.TB, t *task, recs []*kgo.Record, base int64) {
	for i, r := range recs {
		r.Offset = base + int64(i)
	}
	if err := t.feed(context.Background(), nil, "in", recs); err != nil {
		tb.Fatal(err)
	}
	if err := t.node.Flush(); err != nil {
		tb.Fatal(err)
	}
	if err := t.store.batch.Commit(); err != nil {
		tb.Fatal(err)
	}
	t.stepCommitted()
}

// BenchmarkTracingStepPath measures a 500-record step through one task's
// gate and handler with tracing off (no TracerProvider: the default) and
// on (an SDK provider that records every span and exports none), so the
// two are compared in one run; -benchmem shows what each allocates.
//
//	go test ./stage -run '^$' -bench TracingStepPath -benchmem -count 5
func BenchmarkTracingStepPath(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "on"}[on], func(b *testing.B) {
			var tp trace.TracerProvider
			if on {
				p := sdktrace.NewTracerProvider()
				defer p.Shutdown(context.Background())
				tp = p
			}
			t, recs := feedHarness(b, tp)
			feedStep(b, t, recs, 0) // warm: first-use allocations
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				feedStep(b, t, recs, int64(i+1)*int64(len(recs)))
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(recs)), "ns/record")
		})
	}
}

// TestTracingOffAllocatesNothing: with tracing off the step path allocates
// nothing per record (with the identity codec, which allocates nothing
// itself): a steady-state step of 500 deliveries allocates what a step of
// one does, so a hook that allocated when off would show as 500 more.
func TestTracingOffAllocatesNothing(t *testing.T) {
	tk, recs := feedHarness(t, nil)
	base := int64(0)
	step := func(n int) float64 {
		return testing.AllocsPerRun(20, func() {
			feedStep(t, tk, recs[:n], base)
			base += int64(n)
		})
	}
	step(len(recs)) // warm
	small, full := step(1), step(len(recs))
	if full > small+5 {
		t.Fatalf("a 500-record step allocates %.0f, a 1-record step %.0f: the off path allocates per record", full, small)
	}
	// Tracing on does allocate per record (spans): the measure can see it.
	on, recs2 := feedHarness(t, sdktrace.NewTracerProvider())
	base2 := int64(0)
	onStep := func(n int) float64 {
		return testing.AllocsPerRun(20, func() {
			feedStep(t, on, recs2[:n], base2)
			base2 += int64(n)
		})
	}
	onStep(len(recs2))
	if s, f := onStep(1), onStep(len(recs2)); f < s+float64(len(recs2)) {
		t.Errorf("tracing on: %.0f allocations for 500 records vs %.0f for 1; the measure cannot see per-record work", f, s)
	}
}
