package stage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/pprof"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
)

// payment is the record both pipelines decode, transform and encode.
type payment struct {
	ID     int64  `json:"id"`
	Amount int64  `json:"amount"`
	Note   string `json:"note"`
}

// workload is what a stage benchmark feeds both pipelines.
type workload struct {
	records    int
	partitions int32 // of "in" and of "out"
	keys       int   // distinct record keys
	width      int   // offset entries of the vc stamp each input record carries; 0: unstamped
}

// benchLoad is the workload of the two stage benchmarks.
var benchLoad = workload{records: 50000, partitions: 2, keys: 64}

// benchInput fills "in" with w's JSON payments.
func benchInput(b *testing.B, w workload) *env {
	e := newEnv(b, broker.Topic{Name: "in", Partitions: w.partitions}, broker.Topic{Name: "out", Partitions: w.partitions})
	cl, err := e.c.NewClient(kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(100_000))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	var hs []kgo.RecordHeader
	if w.width > 0 {
		hs = upstreamStamp(b, w.width)
	}
	ctx := context.Background()
	for i := range w.records {
		v, _ := json.Marshal(payment{ID: int64(i), Amount: int64(i) * 3, Note: "a payment of some kind, padded to a realistic size"})
		cl.Produce(ctx, &kgo.Record{Topic: "in", Key: fmt.Appendf(nil, "k%d", i%w.keys), Value: v, Headers: hs}, func(_ *kgo.Record, err error) {
			if err != nil {
				b.Error(err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		b.Fatal(err)
	}
	return e
}

// upstreamStamp is a vc stamp of width offset entries on channels the
// stage does not consume, as an upstream writer's records carry: the
// stage folds it into every stamp it writes.
func upstreamStamp(b *testing.B, width int) []kgo.RecordHeader {
	var c headers.Clock
	for i := range width {
		c.SetOffset(headers.Channel{Topic: headers.TopicID{0x70, byte(i / 8)}, Partition: int32(i % 8)}, int64(1000+i))
	}
	v, err := headers.EncodeVC(&c)
	if err != nil {
		b.Fatal(err)
	}
	return []kgo.RecordHeader{{Key: headers.HeaderVC, Value: v}}
}

func transform(p payment) payment {
	p.Amount *= 2
	return p
}

// run is one side's measure: wall time from its first record to the commit
// of its last, and the process's CPU time over the same span.
type run struct{ wall, cpu time.Duration }

func (r *run) add(o run) { r.wall += o.wall; r.cpu += o.cpu }

// cpuTime is the process's user and system CPU time so far.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// plainLoop is the control: franz-go's GroupTransactSession
// consume-transform-produce loop doing the same codec work (string keys and
// JSON values, decoded and encoded), 500 records a transaction, over n
// records.
func plainLoop(b *testing.B, e *env, n int) run {
	sess, err := kgo.NewGroupTransactSession(
		kgo.SeedBrokers(e.c.Addrs()...),
		kgo.TransactionalID("plain"),
		kgo.ConsumerGroup("plain"),
		kgo.ConsumeTopics("in"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.SessionTimeout(2*time.Second), kgo.HeartbeatInterval(500*time.Millisecond),
	)
	if err != nil {
		b.Fatal(err)
	}
	defer sess.Close()
	ctx := context.Background()
	codec, keys := JSON[payment](), String()
	var start time.Time
	var cpu0 time.Duration
	done := 0
	for done < n {
		fs := sess.PollRecords(ctx, 500)
		if fs.NumRecords() == 0 {
			continue
		}
		if start.IsZero() {
			start, cpu0 = time.Now(), cpuTime(b)
		}
		if err := sess.Begin(); err != nil {
			b.Fatal(err)
		}
		var perr atomic.Value
		fs.EachRecord(func(r *kgo.Record) {
			key, err := keys.Decode(r.Key)
			if err != nil {
				b.Fatal(err)
			}
			p, err := codec.Decode(r.Value)
			if err != nil {
				b.Fatal(err)
			}
			k, err := keys.Encode(key)
			if err != nil {
				b.Fatal(err)
			}
			v, err := codec.Encode(transform(p))
			if err != nil {
				b.Fatal(err)
			}
			sess.Produce(ctx, &kgo.Record{Topic: "out", Key: k, Value: v, Timestamp: r.Timestamp}, func(_ *kgo.Record, err error) {
				if err != nil {
					perr.Store(err)
				}
			})
		})
		committed, err := sess.End(ctx, perr.Load() == nil)
		if err != nil {
			b.Fatal(err)
		}
		if committed {
			done += fs.NumRecords()
		}
	}
	return run{wall: time.Since(start), cpu: cpuTime(b) - cpu0}
}

// stageRun runs the same work over n records as a one-stage application
// with 500-record steps.
func stageRun(b *testing.B, e *env, name string, stateful bool, n int, tune ...func(*Config)) run {
	in := NewTopic("in", String(), JSON[payment]())
	out := NewTopic("out", String(), JSON[payment]())
	var started atomic.Int64
	var cpu0 atomic.Int64
	var handled atomic.Int64
	first := func() {
		if handled.Add(1) == 1 {
			started.Store(time.Now().UnixNano())
			cpu0.Store(int64(cpuTime(b)))
		}
	}
	var st *Stage
	if stateful {
		// The same work plus a per-key running total folded in state.
		sb := WithState(Named("bench"), Int64(), 0)
		OnFold(sb, in, func(total int64, m Message[string, payment]) (Step[int64], error) {
			first()
			total += m.Value.Amount
			return Next(total, out.Send(m.Key, transform(m.Value))), nil
		})
		st = sb.Into(out).MustBuild()
	} else {
		st = On(Named("bench"), in, func(m Message[string, payment]) ([]Emission, error) {
			first()
			return []Emission{out.Send(m.Key, transform(m.Value))}, nil
		}).Into(out).MustBuild()
	}
	e.app = name
	parts, err := e.c.Admin().ListTopics(context.Background(), "in")
	if err != nil {
		b.Fatal(err)
	}
	e.changelogs(int32(len(parts["in"].Partitions)), st)
	cfg := e.config(name)
	cfg.MaxPollRecords = 500
	for _, f := range tune {
		f(&cfg)
	}
	a, err := New(cfg, st)
	if err != nil {
		b.Fatal(err)
	}
	finished := make(chan run, 1)
	a.hooks.afterCommit = func() {
		if handled.Load() == int64(n) {
			select {
			case finished <- run{wall: time.Since(time.Unix(0, started.Load())), cpu: cpuTime(b) - time.Duration(cpu0.Load())}:
			default:
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx) }()
	select {
	case r := <-finished:
		cancel()
		<-errc
		return r
	case err := <-errc:
		b.Fatal(errors.Join(errors.New("Run returned"), err))
	case <-time.After(30 * time.Minute):
		b.Fatal("stage did not finish")
	}
	return run{}
}

// compare runs the control and the stage over w, b.N times each, and
// reports both throughputs and two ratios: of wall time (what the shared
// machine's load moves most) and of CPU time (the process's, over each
// side's span; CPU time ÷ wall time stays near 1 on both sides, so the CPU
// ratio is the per-record cost ratio with the scheduler's noise removed).
func compare(b *testing.B, w workload, stateful bool) {
	var plain, staged run
	// The pprof labels let a CPU profile of the run tell the two sides
	// apart (go tool pprof -tagfocus side=stage): every goroutine started
	// inside, the broker's included, inherits its side's label.
	for i := range b.N {
		pprof.Do(context.Background(), pprof.Labels("side", "plain"), func(context.Context) {
			plain.add(plainLoop(b, benchInput(b, w), w.records))
		})
		pprof.Do(context.Background(), pprof.Labels("side", "stage"), func(context.Context) {
			staged.add(stageRun(b, benchInput(b, w), fmt.Sprintf("s%d", i), stateful, w.records))
		})
	}
	n := float64(w.records * b.N)
	b.ReportMetric(n/plain.wall.Seconds(), "plain-rec/s")
	b.ReportMetric(n/staged.wall.Seconds(), "stage-rec/s")
	b.ReportMetric(plain.wall.Seconds()/staged.wall.Seconds(), "ratio")
	b.ReportMetric(plain.cpu.Seconds()/staged.cpu.Seconds(), "cpu-ratio")
}

// BenchmarkStageVsPlainLoop measures, in one run, a one-stage pipeline and
// the plain GroupTransactSession loop over the same 50,000 JSON records in
// 500-record transactions, and reports both throughputs and their ratio.
//
//	go test ./stage -run '^$' -bench StageVsPlainLoop -benchmem -count 3
func BenchmarkStageVsPlainLoop(b *testing.B) { compare(b, benchLoad, false) }

// BenchmarkStatefulStageVsPlainLoop is BenchmarkStageVsPlainLoop with a
// fold: each record also reads and writes its key's state (64 keys), which
// the step commits to SQLite and the changelog.
func BenchmarkStatefulStageVsPlainLoop(b *testing.B) { compare(b, benchLoad, true) }

// BenchmarkDecodeAhead measures what decoding ahead (Config.DecodeAhead)
// buys: each iteration runs the control, the stage decoding on its step
// goroutine only, and the stage at its default, over fresh input, so that
// the machine's load falls on all three alike. It reports the median ratio
// to the iteration's control of each stage variant, by wall and by CPU
// time.
//
//	go test ./stage -run '^$' -bench DecodeAhead -benchtime 16x
func BenchmarkDecodeAhead(b *testing.B) {
	for _, stateful := range []bool{false, true} {
		name := "stateless"
		if stateful {
			name = "stateful"
		}
		b.Run(name, func(b *testing.B) {
			var wall, cpu [2][]float64
			for i := range b.N {
				p := plainLoop(b, benchInput(b, benchLoad), benchLoad.records)
				for v, ahead := range []int{-1, 0} {
					s := stageRun(b, benchInput(b, benchLoad), fmt.Sprintf("s%d-%d", i, v), stateful, benchLoad.records,
						func(c *Config) { c.DecodeAhead = ahead })
					wall[v] = append(wall[v], p.wall.Seconds()/s.wall.Seconds())
					cpu[v] = append(cpu[v], p.cpu.Seconds()/s.cpu.Seconds())
				}
			}
			b.ReportMetric(median(wall[0]), "ratio-step-goroutine")
			b.ReportMetric(median(wall[1]), "ratio-decode-ahead")
			b.ReportMetric(median(cpu[0]), "cpu-ratio-step-goroutine")
			b.ReportMetric(median(cpu[1]), "cpu-ratio-decode-ahead")
		})
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
