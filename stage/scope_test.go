package stage

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/protocol"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// syncBuffer is a log sink safe for the app's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(substr string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for l := range strings.Lines(s.b.String()) {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// saramaDefault is sarama's default partitioner (FNV-1a of the key), as
// franz-go spells it: a producer that does not partition with murmur2.
func saramaDefault() kgo.Partitioner {
	return kgo.StickyKeyPartitioner(kgo.SaramaHasher(func(b []byte) uint32 {
		h := fnv.New32a()
		h.Write(b)
		return h.Sum32()
	}))
}

const scopeWarning = "claims a cause that another task consumes"

// TestScopeWarning: orders are written with murmur2, and each payment,
// stamped with the order as its cause, by a second producer. With sarama's
// FNV-1a partitioner most payments land on another partition than their
// order, so the task that delivers a payment does not consume its order:
// the stage counts every such delivery and warns once per topic pair,
// naming both coordinates. With murmur2 the payments sit with their orders
// and the stage stays quiet, though every payment still claims orders on
// other partitions (the producer's earlier sends).
func TestScopeWarning(t *testing.T) {
	for _, tc := range []struct {
		name        string
		partitioner kgo.Partitioner
		warn        bool
	}{
		{"murmur2", kgo.StickyKeyPartitioner(nil), false},
		{"sarama-fnv", saramaDefault(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const parts, pairs = 4, 24
			e := newEnv(t,
				broker.Topic{Name: "orders", Partitions: parts},
				broker.Topic{Name: "payments", Partitions: parts},
				broker.Topic{Name: "out", Partitions: parts})
			out := NewTopic("out", String(), String())
			b := Named("settle")
			for _, n := range []string{"orders", "payments"} {
				On(b, NewTopic(n, String(), String()), func(m Message[string, string]) ([]Emission, error) {
					return []Emission{out.Send(m.Key, m.Value)}, nil
				})
			}
			st := b.Into(out).MustBuild()
			e.changelogs(parts, st)
			logs := new(syncBuffer)
			cfg := e.config("i1")
			cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
			r := e.start(cfg, st)
			reg := prometheus.NewRegistry()
			reg.MustRegister(r.app.Collector())

			orderer, err := e.c.NewClient() // franz-go's default: murmur2
			if err != nil {
				t.Fatal(err)
			}
			defer orderer.Close()
			payer, err := e.c.NewClient(kgo.RecordPartitioner(tc.partitioner))
			if err != nil {
				t.Fatal(err)
			}
			defer payer.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			clk := clock.New(e.c.Admin())
			send := func(cl *kgo.Client, topic, key string) *kgo.Record {
				rec := &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(topic + " " + key)}
				if err := clk.Stamp(ctx, rec); err != nil {
					t.Fatal(err)
				}
				if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
					t.Fatal(err)
				}
				if err := clk.RecordProduced(rec); err != nil {
					t.Fatal(err)
				}
				return rec
			}
			misplaced, crossClaims := 0, 0
			for i := range pairs {
				key := fmt.Sprintf("order-%d", i)
				o := send(orderer, "orders", key)
				p := send(payer, "payments", key)
				if o.Partition != p.Partition {
					misplaced++
				}
				s, err := clock.ReadRecordStamp(p)
				if err != nil {
					t.Fatal(err)
				}
				for e := range s.Clock.OffsetEntries() {
					if e.Channel.Partition != p.Partition {
						crossClaims++
						break
					}
				}
			}
			if tc.warn != (misplaced > 0) {
				t.Fatalf("%d of %d payments on another partition than their order; the case is vacuous", misplaced, pairs)
			}
			if crossClaims == 0 {
				t.Fatal("no payment claims a cause on another partition; the quiet case is vacuous")
			}
			e.readExactly("out", 2*pairs, 30*time.Second)

			series := scrape(t, reg)[metricScopeCrossings]
			warned := logs.lines(scopeWarning)
			if !tc.warn {
				if len(series) != 0 || len(warned) != 0 {
					t.Fatalf("murmur2 producers: counted %v and warned %q; want silence", series, warned)
				}
				return
			}
			n := series["application=app,claimed_topic=orders,stage=settle,topic=payments"]
			if n < 2 {
				t.Fatalf("counted %v for %d misplaced payments; want at least 2 for payments claiming orders", series, misplaced)
			}
			var pair []string
			for _, l := range warned {
				if strings.Contains(l, "claims=orders/") {
					pair = append(pair, l)
				}
			}
			if len(pair) != 1 {
				t.Fatalf("%d warnings for the pair (payments, orders) over %v deliveries; want exactly one:\n%s", len(pair), n, strings.Join(warned, ""))
			}
			for _, want := range []string{"level=WARN", "stage=settle", "delivered=payments/", "claims=orders/", "murmur2", "keyed differently"} {
				if !strings.Contains(pair[0], want) {
					t.Errorf("warning %q does not mention %q", pair[0], want)
				}
			}
		})
	}
}

// TestScopeCheckSkipsStageSends: the check judges plain producers'
// placement. A tick stays on its task's partition whatever murmur2 of its
// key says, and a tagged record was placed by a stage; neither is counted.
// An untagged record placed the same way is, once per claimed topic.
func TestScopeCheckSkipsStageSends(t *testing.T) {
	ordersID, ticksID := headers.TopicID{1}, headers.TopicID{2}
	orders := &binding{topic: "orders"}
	ticks := &binding{topic: "ticks", tick: true}
	var sw scopeWarnings
	logs := new(syncBuffer)
	tk := &task{
		env: &taskEnv{
			topics: map[string]topicMeta{"orders": {id: ordersID, partitions: 2}, "ticks": {id: ticksID, partitions: 2}},
			scope:  &sw,
			log:    slog.New(slog.NewTextHandler(logs, nil)),
		},
		st:        &Stage{name: "s"},
		partition: 1,
		byID:      map[headers.TopicID]*binding{ordersID: orders, ticksID: ticks},
	}
	key := []byte("k0")
	for partitionFor(key, false, 2, 0) != 0 {
		key = append(key, '0')
	}
	delivery := func(topic headers.TopicID, tagged bool) *protocol.Delivery {
		d := &protocol.Delivery{Record: protocol.Record{
			Coordinate: headers.Coordinate{Channel: headers.Channel{Topic: topic, Partition: 1}, Offset: 5},
			Key:        key,
		}}
		d.Stamp.Tagged = tagged
		d.Stamp.Clock.SetOffset(headers.Channel{Topic: ordersID, Partition: 0}, 3)
		d.Stamp.Clock.SetOffset(headers.Channel{Topic: ordersID, Partition: 1}, 2)
		d.Stamp.Clock.SetOffset(headers.Channel{Topic: ticksID, Partition: 0}, 7)
		return d
	}
	tk.checkScope(ticks, delivery(ticksID, false))
	tk.checkScope(orders, delivery(ordersID, true))
	sw.commitStep()
	if got := sw.snapshot(); len(got) != 0 {
		t.Fatalf("a tick and a tagged record were counted: %v", got)
	}
	tk.checkScope(orders, delivery(ordersID, false))
	tk.checkScope(orders, delivery(ordersID, false))
	sw.commitStep()
	got := sw.snapshot()
	want := []scopeCount{{scopePair{"s", "orders", "orders"}, 2}, {scopePair{"s", "orders", "ticks"}, 2}}
	if !slices.Equal(got, want) {
		t.Fatalf("counted %v, want %v", got, want)
	}
	if n := len(logs.lines(scopeWarning)); n != 2 {
		t.Fatalf("%d warnings, want one per claimed topic:\n%s", n, logs.b.String())
	}
	// An aborted step's counts go; the warning does not repeat.
	tk.checkScope(orders, delivery(ordersID, false))
	sw.abortStep()
	sw.commitStep()
	if got := sw.snapshot(); !slices.Equal(got, want) {
		t.Fatalf("after an aborted step counted %v, want %v", got, want)
	}
}

// BenchmarkScopeCheck measures the check every delivery pays, against a
// control that only walks the delivered stamp's offset entries: "home" is
// the common case (the key is where murmur2 puts it), "misplaced" a record
// that is counted (after its pair was warned about once).
func BenchmarkScopeCheck(b *testing.B) {
	ordersID := headers.TopicID{1}
	orders := &binding{topic: "orders"}
	var sw scopeWarnings
	tk := &task{
		env: &taskEnv{
			topics: map[string]topicMeta{"orders": {id: ordersID, partitions: 8}},
			scope:  &sw,
			log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
		},
		st:   &Stage{name: "s"},
		byID: map[headers.TopicID]*binding{ordersID: orders},
	}
	d := &protocol.Delivery{Record: protocol.Record{Key: []byte("order-000042")}}
	for p := range int32(8) {
		d.Stamp.Clock.SetOffset(headers.Channel{Topic: ordersID, Partition: p}, int64(100+p))
	}
	home := partitionFor(d.Key, false, 8, 0)
	b.Run("control", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			for e := range d.Stamp.Clock.OffsetEntries() {
				if e.Channel.Partition != home {
					n++
				}
			}
		}
		_ = n
	})
	b.Run("home", func(b *testing.B) {
		tk.partition = home
		b.ReportAllocs()
		for b.Loop() {
			tk.checkScope(orders, d)
		}
	})
	b.Run("misplaced", func(b *testing.B) {
		tk.partition = (home + 1) % 8
		b.ReportAllocs()
		for b.Loop() {
			tk.checkScope(orders, d)
			sw.abortStep()
		}
	})
}
