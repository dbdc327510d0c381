package bridge

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/parsley-go/parsley/internal/rig/broker"
	dto "github.com/prometheus/client_model/go"
	"github.com/synadia-io/orbit.go/jetstreamext"
	"github.com/twmb/franz-go/pkg/kgo"
)

const benchRecords = 10000

// BenchmarkForward forwards the same records from Kafka to a fresh stream
// per run: with a plain consume-and-publish loop (no causal gate, no
// transaction, pipelined publishes with message IDs, 64 in flight), and
// with the bridge publishing each step as one atomic batch (the default)
// record by record at MaxInFlight 1 and 64, and as one fast batch per
// step (FastBatch, on streams that allow batched publish); on an R1 stream
// in a file, in memory, and replicated over a three-node cluster (R3,
// file).
// Each bridge iteration runs the plain loop too, on a stream of the same
// kind, so the machine's load cancels out of the ratios: ratio is the
// bridge's records/s over the plain loop's end to end (the bridge's group
// join, restore and startup checks included); steady-ratio the same from
// the first record each side handles (the plain loop's first fetch, the
// start of the bridge's first step with records) to the last
// acknowledgement; cpu-ratio the plain loop's process CPU time (user and
// system, the in-process brokers' included) over the bridge's, end to end,
// which a loaded machine disturbs less than wall time.
//
//	go test ./bridge -run '^$' -bench Forward -benchtime 3x -count 3 -benchmem
func BenchmarkForward(b *testing.B) {
	e := newEnv(b, 1, "bench")
	var recs []*kgo.Record
	for i := range benchRecords {
		recs = append(recs, rec("bench", 0, "k"+strconv.Itoa(i%50), fmt.Sprintf("value-%06d-%s", i, "................................................................")))
	}
	e.produce(recs...)
	var r3 *env // started by the first R3 variant
	target := func(replicas int) *env {
		if replicas == 1 {
			return e
		}
		if r3 == nil {
			r3 = e.withCluster(b, replicas)
		}
		return r3
	}
	iter := 0
	next := func(t *env, storage jetstream.StorageType, replicas int, batched bool) (streamName, group string) {
		iter++
		streamName, group = fmt.Sprintf("B%d", iter), fmt.Sprintf("g%d", iter)
		t.createStreamWaiting(jetstream.StreamConfig{Name: streamName, Subjects: []string{"b" + strconv.Itoa(iter) + ".>"}, Duplicates: 2 * time.Minute, AllowAtomicPublish: true, AllowBatchPublish: batched, Storage: storage, Replicas: replicas})
		if err := e.kafka.CreateTopics(context.Background(), broker.Topic{Name: ChangelogTopic(group, "bridge"), Configs: compact}); err != nil {
			b.Fatal(err)
		}
		return streamName, group
	}
	plain := func(b *testing.B, t *env, storage jetstream.StorageType, replicas int) (total, steady, cpu time.Duration) {
		streamName, _ := next(t, storage, replicas, false)
		subj := "b" + strconv.Itoa(iter) + ".bench."
		start, cpu0 := time.Now(), cpuTime(b)
		first, err := plainLoop(t, streamName, subj, 64)
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(start), time.Since(first), cpuTime(b) - cpu0
	}
	b.Run("plain-loop", func(b *testing.B) {
		var total, steady time.Duration
		for range b.N {
			t, s, _ := plain(b, e, jetstream.FileStorage, 1)
			total, steady = total+t, steady+s
		}
		b.ReportMetric(float64(benchRecords*b.N)/total.Seconds(), "records/s")
		b.ReportMetric(float64(benchRecords*b.N)/steady.Seconds(), "steady-records/s")
	})
	for _, v := range []struct {
		name     string
		mode     PublishMode
		inflight int
		storage  jetstream.StorageType
		replicas int
		// serverBatch, when set, is the NATS server's max_batch_size
		// for the variant (R1 only): the server restarts with it.
		serverBatch int
	}{
		{"bridge-atomic-batch", AtomicBatch, 0, jetstream.FileStorage, 1, 0},
		// A server that takes batches of 10,000 (the bridge learns it):
		// a default step is one batch, one sync of its staging file.
		{"max-batch-10000/bridge-atomic-batch", AtomicBatch, 0, jetstream.FileStorage, 1, 10_000},
		{"bridge-per-message-inflight-1", PerMessage, 1, jetstream.FileStorage, 1, 0},
		{"bridge-per-message-inflight-64", PerMessage, 64, jetstream.FileStorage, 1, 0},
		// A stream in memory, or replicated, stages atomic batches in
		// memory; an R1 file stream stages each in a file store of its
		// own, written message by message and synced at the commit.
		{"memory-stream/bridge-atomic-batch", AtomicBatch, 0, jetstream.MemoryStorage, 1, 0},
		{"memory-stream/bridge-per-message-inflight-64", PerMessage, 64, jetstream.MemoryStorage, 1, 0},
		{"r3-file-stream/bridge-atomic-batch", AtomicBatch, 0, jetstream.FileStorage, 3, 0},
		{"r3-file-stream/bridge-per-message-inflight-64", PerMessage, 64, jetstream.FileStorage, 3, 0},
		// Fast batches are stored as they arrive, on every kind of stream.
		{"bridge-fast-batch", FastBatch, 0, jetstream.FileStorage, 1, 0},
		{"memory-stream/bridge-fast-batch", FastBatch, 0, jetstream.MemoryStorage, 1, 0},
		{"r3-file-stream/bridge-fast-batch", FastBatch, 0, jetstream.FileStorage, 3, 0},
	} {
		b.Run(v.name, func(b *testing.B) {
			t := target(v.replicas)
			if v.serverBatch > 0 {
				t.stopNATS()
				t.natsLimits.MaxBatchSize = v.serverBatch
				t.startNATS()
				defer func() {
					t.stopNATS()
					t.natsLimits.MaxBatchSize = 0
					t.startNATS()
				}()
			}
			pollJS, closeJS := t.js()
			defer closeJS()
			var total, steady, control, controlSteady, open, cpu, controlCPU time.Duration
			for range b.N {
				ct, cs, cc := plain(b, t, v.storage, v.replicas)
				control, controlSteady, controlCPU = control+ct, controlSteady+cs, controlCPU+cc
				streamName, group := next(t, v.storage, v.replicas, v.mode == FastBatch)
				cfg := t.config("bench")
				cfg.ApplicationID, cfg.Stream, cfg.Publish, cfg.MaxInFlight = group, streamName, v.mode, v.inflight
				cfg.StateDir = b.TempDir()
				cfg.Subject, _ = Template("b" + strconv.Itoa(iter) + ".{topic}.{key}")
				br, h := newHooked(b, cfg)
				start, cpu0 := time.Now(), cpuTime(b)
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- br.Run(ctx) }()
				for streamCount(t, pollJS, streamName) < benchRecords {
					time.Sleep(2 * time.Millisecond)
				}
				end := time.Now()
				cpu += cpuTime(b) - cpu0
				// The last batch may be stored before its step's Settle
				// (a step's batches commit as they fill), which is where
				// the hook learns when the first step with records began.
				for h.started().IsZero() {
					time.Sleep(time.Millisecond)
				}
				total += end.Sub(start)
				steady += end.Sub(h.started())
				cancel()
				if err := <-done; err != nil {
					b.Fatal(err)
				}
				var m dto.Metric
				if err := br.pub.m.latency.Write(&m); err != nil {
					b.Fatal(err)
				}
				open += time.Duration(m.GetHistogram().GetSampleSum() * float64(time.Second))
			}
			if v.mode == AtomicBatch || v.mode == FastBatch {
				// The batches' open times (first message sent to commit
				// acknowledged) over the steady time. An atomic batch
				// streams while the previous one commits, so their times
				// overlap and the share may pass 1.
				b.ReportMetric(open.Seconds()/steady.Seconds(), "batch-open-share")
			}
			b.ReportMetric(float64(benchRecords*b.N)/total.Seconds(), "records/s")
			b.ReportMetric(float64(benchRecords*b.N)/steady.Seconds(), "steady-records/s")
			b.ReportMetric(control.Seconds()/total.Seconds(), "ratio")
			b.ReportMetric(controlSteady.Seconds()/steady.Seconds(), "steady-ratio")
			b.ReportMetric(controlCPU.Seconds()/cpu.Seconds(), "cpu-ratio")
		})
	}
}

// cpuTime is the process's user and system CPU time so far: the bridge's,
// the plain loop's and the embedded brokers' together, all in process.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// streamCount returns how many messages the stream holds. A replicated
// stream may not answer at once after its creation (it elects a leader):
// errors are retried for 10 seconds.
func streamCount(e *env, js jetstream.JetStream, name string) uint64 {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		s, err := js.Stream(context.Background(), name)
		var info *jetstream.StreamInfo
		if err == nil {
			info, err = s.Info(context.Background())
		}
		if err == nil {
			return info.State.Msgs
		}
		if time.Now().After(deadline) {
			e.t.Fatal(err)
		}
	}
}

// plainLoop is the control: read the topic from the start and publish
// every record on subject subj+key, pipelined, then wait for every
// acknowledgement. It returns when the first fetch returned records.
func plainLoop(e *env, streamName, subj string, inflight int) (first time.Time, err error) {
	cl, err := e.kafka.NewClient(kgo.ConsumeTopics("bench"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		return first, err
	}
	defer cl.Close()
	nc, err := nats.Connect(e.natsURL())
	if err != nil {
		return first, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(inflight))
	if err != nil {
		return first, err
	}
	ctx := context.Background()
	n := 0
	for n < benchRecords {
		fs := cl.PollFetches(ctx)
		if err := fs.Err(); err != nil {
			return first, err
		}
		if first.IsZero() && fs.NumRecords() > 0 {
			first = time.Now()
		}
		for it := fs.RecordIter(); !it.Done(); {
			r := it.Next()
			h := nats.Header{}
			h.Set(HeaderMsgID, fmt.Sprintf("%s/%d@%d", r.Topic, r.Partition, r.Offset))
			for _, rh := range r.Headers {
				h.Add(rh.Key, string(rh.Value))
			}
			if _, err := js.PublishMsgAsync(&nats.Msg{Subject: subj + KeyToken(r.Key), Data: r.Value, Header: h}, jetstream.WithExpectStream(streamName),
				// The default stall wait (200 ms) fails the loop when the
				// loaded machine delays acknowledgements: wait as the
				// bridge does, up to an ack timeout.
				jetstream.WithStallWait(5*time.Second)); err != nil {
				return first, err
			}
			n++
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		return first, fmt.Errorf("acknowledgements outstanding after 30s")
	}
	if c := streamCount(e, js, streamName); c != benchRecords {
		return first, fmt.Errorf("stream %s has %d messages, want %d", streamName, c, benchRecords)
	}
	return first, nil
}

// BenchmarkPublishCost publishes n messages straight to the embedded
// server: as one atomic batch (what the bridge does), as one fast batch
// (JetStream's fast ingest, allow_batched: stored as they arrive, a gap
// ends the batch; the bridge does not use it) and pipelined with
// PublishMsgAsync (64 in flight), on an R1 stream in a file and in
// memory: what each path costs NATS, without Kafka or the bridge. It
// reports µs/msg.
//
//	go test ./bridge -run '^$' -bench PublishCost -benchtime 5x
func BenchmarkPublishCost(b *testing.B) {
	e := newEnv(b, 1, "unused")
	js, done := e.js()
	defer done()
	streams := 0
	for _, storage := range []jetstream.StorageType{jetstream.FileStorage, jetstream.MemoryStorage} {
		for _, n := range []int{1, 100, 500, 1000} {
			for _, how := range []string{"atomic-batch", "fast-batch", "async"} {
				b.Run(fmt.Sprintf("%s/%s/%d", storage, how, n), func(b *testing.B) {
					streams++
					name := "P" + strconv.Itoa(streams)
					e.createStream(jetstream.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name) + ".>"}, Duplicates: 2 * time.Minute, AllowAtomicPublish: true, AllowBatchPublish: true, Storage: storage})
					var total time.Duration
					for i := range b.N {
						msgs := make([]*nats.Msg, n)
						for j := range msgs {
							h := nats.Header{}
							h.Set(HeaderMsgID, fmt.Sprintf("%d-%d", i, j))
							msgs[j] = &nats.Msg{Subject: strings.ToLower(name) + ".k" + strconv.Itoa(j%50), Data: []byte(fmt.Sprintf("value-%06d-%64s", j, "")), Header: h}
						}
						start := time.Now()
						switch how {
						case "atomic-batch":
							if _, err := jetstreamext.PublishMsgBatch(context.Background(), js, msgs, jetstreamext.BatchFlowControl{AckTimeout: 5 * time.Second}); err != nil {
								b.Fatal(err)
							}
						case "fast-batch":
							fp, err := jetstreamext.NewFastPublisher(js, jetstreamext.FastPublishFlowControl{AckTimeout: 5 * time.Second})
							if err != nil {
								b.Fatal(err)
							}
							for _, m := range msgs[:n-1] {
								if _, err := fp.AddMsg(m); err != nil {
									b.Fatal(err)
								}
							}
							if _, err := fp.CommitMsg(context.Background(), msgs[n-1]); err != nil {
								b.Fatal(err)
							}
						default:
							for _, m := range msgs {
								if _, err := js.PublishMsgAsync(m, jetstream.WithExpectStream(name)); err != nil {
									b.Fatal(err)
								}
							}
							select {
							case <-js.PublishAsyncComplete():
							case <-time.After(30 * time.Second):
								b.Fatal("acknowledgements outstanding after 30s")
							}
						}
						total += time.Since(start)
					}
					if got := streamCount(e, js, name); got != uint64(n*b.N) {
						b.Fatalf("stream holds %d messages, want %d", got, n*b.N)
					}
					b.ReportMetric(float64(total.Microseconds())/float64(n*b.N), "µs/msg")
				})
			}
		}
	}
}
