package bridge

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/parsley-go/parsley/internal/broker"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
)

const benchRecords = 2000

// BenchmarkForward forwards the same records from Kafka to a fresh stream
// per iteration: once with a plain consume-and-publish loop (no causal
// gate, no transaction, pipelined publishes with message IDs), and once
// with the bridge at MaxInFlight 1 and 64. Compare records/s as a ratio:
// every variant runs in the same process on the same brokers.
//
//	go test ./bridge -run '^$' -bench Forward -benchtime 5x -benchmem
func BenchmarkForward(b *testing.B) {
	e := newEnv(b, 1, "bench")
	var recs []*kgo.Record
	for i := range benchRecords {
		recs = append(recs, rec("bench", 0, "k"+strconv.Itoa(i%50), fmt.Sprintf("value-%06d-%s", i, "................................................................")))
	}
	e.produce(recs...)
	iter := 0
	next := func() (streamName, group string) {
		iter++
		streamName, group = fmt.Sprintf("B%d", iter), fmt.Sprintf("g%d", iter)
		e.createStream(jetstream.StreamConfig{Name: streamName, Subjects: []string{"b" + strconv.Itoa(iter) + ".>"}, Duplicates: 2 * time.Minute})
		if err := e.kafka.CreateTopics(context.Background(), broker.Topic{Name: ChangelogTopic(group, "bridge"), Configs: compact}); err != nil {
			b.Fatal(err)
		}
		return streamName, group
	}
	pollJS, closeJS := e.js()
	defer closeJS()
	report := func(b *testing.B, total time.Duration) {
		b.ReportMetric(float64(benchRecords*b.N)/total.Seconds(), "records/s")
	}

	b.Run("plain-loop", func(b *testing.B) {
		var total time.Duration
		for range b.N {
			streamName, _ := next()
			subj := "b" + strconv.Itoa(iter) + ".bench."
			start := time.Now()
			if err := plainLoop(e, streamName, subj, 64); err != nil {
				b.Fatal(err)
			}
			total += time.Since(start)
		}
		report(b, total)
	})
	for _, inflight := range []int{1, 64} {
		b.Run(fmt.Sprintf("bridge-inflight-%d", inflight), func(b *testing.B) {
			var total, steady time.Duration
			for range b.N {
				streamName, group := next()
				cfg := e.config("bench")
				cfg.Group, cfg.Stream, cfg.MaxInFlight = group, streamName, inflight
				cfg.StateDir = b.TempDir()
				cfg.Subject, _ = Template("b" + strconv.Itoa(iter) + ".{topic}.{key}")
				br, err := New(cfg)
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- br.Run(ctx) }()
				var first time.Time
				for br.CommittedSteps() == 0 || streamCount(e, pollJS, streamName) < benchRecords {
					if first.IsZero() && br.pub.m != nil && testutilPublished(br) > 0 {
						first = time.Now()
					}
					time.Sleep(2 * time.Millisecond)
				}
				total += time.Since(start)
				steady += time.Since(first)
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
			}
			report(b, total)
			// Steady state: from the first acknowledged publish to the
			// last, leaving out the group join, restore and stream checks.
			b.ReportMetric(float64((benchRecords-1)*b.N)/steady.Seconds(), "steady-records/s")
		})
	}
}

func testutilPublished(b *Bridge) float64 { return testutil.ToFloat64(b.pub.m.published) }

func streamCount(e *env, js jetstream.JetStream, name string) uint64 {
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.Msgs
}

// plainLoop is the control: read the topic from the start and publish
// every record on subject subj+key, pipelined, then wait for every
// acknowledgement.
func plainLoop(e *env, streamName, subj string, inflight int) error {
	cl, err := e.kafka.NewClient(kgo.ConsumeTopics("bench"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return err
	}
	defer cl.Close()
	nc, err := nats.Connect(e.natsURL())
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(inflight))
	if err != nil {
		return err
	}
	ctx := context.Background()
	n := 0
	for n < benchRecords {
		fs := cl.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			return err
		}
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			h := nats.Header{}
			h.Set(HeaderMsgID, fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset))
			for _, rh := range r.Headers {
				h.Add(rh.Key, string(rh.Value))
			}
			if _, err := js.PublishMsgAsync(&nats.Msg{Subject: subj + KeyToken(r.Key), Data: r.Value, Header: h}, jetstream.WithExpectStream(streamName)); err != nil {
				return err
			}
			n++
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		return fmt.Errorf("acknowledgements outstanding after 30s")
	}
	if c := streamCount(e, js, streamName); c != benchRecords {
		return fmt.Errorf("stream %s has %d messages, want %d", streamName, c, benchRecords)
	}
	return nil
}
