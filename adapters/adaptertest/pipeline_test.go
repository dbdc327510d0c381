package adaptertest_test

import (
	"context"
	"testing"

	"github.com/parsley-go/parsley/adapters/adaptertest"
	"github.com/parsley-go/parsley/clock"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// franzClient is the reference client: franz-go with package clock's own
// API. It is the control every adapter's run is compared with.
type franzClient struct {
	cl    *kgo.Client
	clk   *clock.Clock
	stamp bool
}

func newFranz(stamp bool) func(context.Context, []string) (adaptertest.Client, error) {
	return func(_ context.Context, addrs []string) (adaptertest.Client, error) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...))
		if err != nil {
			return nil, err
		}
		return &franzClient{cl: cl, clk: clock.New(kadm.NewClient(cl)), stamp: stamp}, nil
	}
}

func (f *franzClient) Produce(ctx context.Context, topic string, key, value []byte) error {
	rec := &kgo.Record{Topic: topic, Key: key, Value: value}
	if f.stamp {
		if err := f.clk.Stamp(ctx, rec); err != nil {
			return err
		}
	}
	if err := f.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return err
	}
	return f.clk.RecordProduced(rec)
}

func (f *franzClient) Consume(ctx context.Context, topic string, n int, handle func(key, value []byte) error) error {
	f.cl.AddConsumeTopics(topic)
	for seen := 0; seen < n; {
		fs := f.cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			return err
		}
		for _, r := range fs.Records() {
			if f.stamp {
				if err := f.clk.Observe(r); err != nil {
					return err
				}
			}
			if err := handle(r.Key, r.Value); err != nil {
				return err
			}
			seen++
		}
	}
	return nil
}

func (f *franzClient) Close() error { f.cl.Close(); return nil }

func TestPipelineWithFranzGo(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a stage on the embedded broker")
	}
	adaptertest.Test(t, 40, newFranz)
}
