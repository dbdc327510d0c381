package stage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/broker"
	"github.com/twmb/franz-go/pkg/kgo"
)

// payment is the record both pipelines decode, transform and encode.
type payment struct {
	ID     int64  `json:"id"`
	Amount int64  `json:"amount"`
	Note   string `json:"note"`
}

const benchRecords = 50000

// benchInput fills "in" (two partitions) with benchRecords JSON payments.
func benchInput(b *testing.B) *env {
	e := newEnv(b, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	cl, err := e.c.NewClient(kgo.ProducerLinger(5 * time.Millisecond))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	for i := range benchRecords {
		v, _ := json.Marshal(payment{ID: int64(i), Amount: int64(i) * 3, Note: "a payment of some kind, padded to a realistic size"})
		cl.Produce(ctx, &kgo.Record{Topic: "in", Key: fmt.Appendf(nil, "k%d", i%64), Value: v}, func(_ *kgo.Record, err error) {
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

func transform(p payment) payment {
	p.Amount *= 2
	return p
}

// plainLoop is the control: franz-go's GroupTransactSession
// consume-transform-produce loop doing the same codec work (string keys and
// JSON values, decoded and encoded), 500 records a transaction. It returns the time from the first record polled to the
// commit of the last.
func plainLoop(b *testing.B, e *env) time.Duration {
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
	done := 0
	for done < benchRecords {
		fs := sess.PollRecords(ctx, 500)
		if fs.NumRecords() == 0 {
			continue
		}
		if start.IsZero() {
			start = time.Now()
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
	return time.Since(start)
}

// stageRun runs the same work as a one-stage application with 500-record
// steps, and returns the time from the first delivery to the commit of the
// last record's step.
func stageRun(b *testing.B, e *env, name string, stateful bool) time.Duration {
	in := NewTopic("in", String(), JSON[payment]())
	out := NewTopic("out", String(), JSON[payment]())
	var started atomic.Int64
	var handled atomic.Int64
	var st *Stage
	if stateful {
		// The same work plus a per-key running total folded in state.
		sb := WithState(Named("bench"), Int64(), 0)
		OnFold(sb, in, func(total int64, m Message[string, payment]) (Step[int64], error) {
			if handled.Add(1) == 1 {
				started.Store(time.Now().UnixNano())
			}
			total += m.Value.Amount
			return Next(total, out.Send(m.Key, transform(m.Value))), nil
		})
		st = sb.Into(out).MustBuild()
	} else {
		st = On(Named("bench"), in, func(m Message[string, payment]) ([]Emission, error) {
			if handled.Add(1) == 1 {
				started.Store(time.Now().UnixNano())
			}
			return []Emission{out.Send(m.Key, transform(m.Value))}, nil
		}).Into(out).MustBuild()
	}
	e.app = name
	e.changelogs(2, st)
	cfg := e.config(name)
	cfg.MaxPollRecords = 500
	a, err := New(cfg, st)
	if err != nil {
		b.Fatal(err)
	}
	finished := make(chan time.Time, 1)
	a.hooks.afterCommit = func() {
		if handled.Load() == benchRecords {
			select {
			case finished <- time.Now():
			default:
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- a.Run(ctx) }()
	select {
	case end := <-finished:
		cancel()
		<-errc
		return end.Sub(time.Unix(0, started.Load()))
	case err := <-errc:
		b.Fatal(errors.Join(errors.New("Run returned"), err))
	case <-time.After(5 * time.Minute):
		b.Fatal("stage did not finish")
	}
	return 0
}

// BenchmarkStageVsPlainLoop measures, in one run, a one-stage pipeline and
// the plain GroupTransactSession loop over the same 20000 JSON records in
// 500-record transactions, and reports both throughputs and their ratio.
//
//	go test ./stage -run '^$' -bench StageVsPlainLoop -benchmem -count 3
func BenchmarkStageVsPlainLoop(b *testing.B) {
	var plain, staged time.Duration
	for i := range b.N {
		plain += plainLoop(b, benchInput(b))
		staged += stageRun(b, benchInput(b), fmt.Sprintf("s%d", i), false)
	}
	n := float64(benchRecords * b.N)
	b.ReportMetric(n/plain.Seconds(), "plain-rec/s")
	b.ReportMetric(n/staged.Seconds(), "stage-rec/s")
	b.ReportMetric(plain.Seconds()/staged.Seconds(), "ratio")
}

// BenchmarkStatefulStageVsPlainLoop is BenchmarkStageVsPlainLoop with a
// fold: each record also reads and writes its key's state (64 keys), which
// the step commits to SQLite and the changelog.
func BenchmarkStatefulStageVsPlainLoop(b *testing.B) {
	var plain, staged time.Duration
	for i := range b.N {
		plain += plainLoop(b, benchInput(b))
		staged += stageRun(b, benchInput(b), fmt.Sprintf("s%d", i), true)
	}
	n := float64(benchRecords * b.N)
	b.ReportMetric(n/plain.Seconds(), "plain-rec/s")
	b.ReportMetric(n/staged.Seconds(), "stage-rec/s")
	b.ReportMetric(plain.Seconds()/staged.Seconds(), "ratio")
}
