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
// per run: with a plain consume-and-publish loop (no causal gate, no
// transaction, pipelined publishes with message IDs, 64 in flight), and
// with the bridge publishing each step as one atomic batch (the default)
// and record by record at MaxInFlight 1 and 64. Each bridge iteration
// runs the plain loop too, on the same brokers, and reports ratio: the
// bridge's records/s over the plain loop's, so the machine's load cancels
// out.
//
//	go test ./bridge -run '^$' -bench Forward -benchtime 5x -count 3
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
		e.createStream(jetstream.StreamConfig{Name: streamName, Subjects: []string{"b" + strconv.Itoa(iter) + ".>"}, Duplicates: 2 * time.Minute, AllowAtomicPublish: true})
		if err := e.kafka.CreateTopics(context.Background(), broker.Topic{Name: ChangelogTopic(group, "bridge"), Configs: compact}); err != nil {
			b.Fatal(err)
		}
		return streamName, group
	}
	pollJS, closeJS := e.js()
	defer closeJS()
	plain := func(b *testing.B) time.Duration {
		streamName, _ := next()
		subj := "b" + strconv.Itoa(iter) + ".bench."
		start := time.Now()
		if err := plainLoop(e, streamName, subj, 64); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	b.Run("plain-loop", func(b *testing.B) {
		var total time.Duration
		for range b.N {
			total += plain(b)
		}
		b.ReportMetric(float64(benchRecords*b.N)/total.Seconds(), "records/s")
	})
	for _, v := range []struct {
		name     string
		mode     PublishMode
		inflight int
	}{
		{"bridge-atomic-batch", AtomicBatch, 0},
		{"bridge-per-message-inflight-1", PerMessage, 1},
		{"bridge-per-message-inflight-64", PerMessage, 64},
	} {
		b.Run(v.name, func(b *testing.B) {
			var total, steady, control time.Duration
			for range b.N {
				control += plain(b)
				streamName, group := next()
				cfg := e.config("bench")
				cfg.Group, cfg.Stream, cfg.Publish, cfg.MaxInFlight = group, streamName, v.mode, v.inflight
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
					if first.IsZero() && testutilPublished(br) > 0 {
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
			b.ReportMetric(float64(benchRecords*b.N)/total.Seconds(), "records/s")
			// Steady state: from the first acknowledged publish to the
			// last, leaving out the group join, restore and stream checks.
			b.ReportMetric(float64((benchRecords-1)*b.N)/steady.Seconds(), "steady-records/s")
			b.ReportMetric(control.Seconds()/total.Seconds(), "ratio")
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
