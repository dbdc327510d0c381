package stage

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/state"
	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkScale measures how the stage's cost grows: with partitions per
// topic, with the width of the stamps it reads, with the number of keys of
// state, how fast a changelog restores into an empty store, and how much
// memory a task keeps per held record. It runs minutes, so it is skipped
// unless PARSLEY_SCALE is set; PARSLEY_SCALE_KEYS (default 1,000,000)
// scales its largest point down on a smaller machine. Its output, kept in
// docs/scale/bench.txt (docs/performance.md, "How cost grows"), is what
// the plots in docs/scale are drawn from:
//
//	PARSLEY_SCALE=1 go test ./stage -run '^$' -bench Scale -benchtime 1x -count 3 -timeout 3h | tee docs/scale/bench.txt
//	go -C tools/scaleplot run . ../../docs/scale/bench.txt ../../docs/scale
func BenchmarkScale(b *testing.B) {
	if os.Getenv("PARSLEY_SCALE") == "" {
		b.Skip("long: set PARSLEY_SCALE=1 (docs/performance.md, How cost grows)")
	}
	big := 1_000_000
	if s := os.Getenv("PARSLEY_SCALE_KEYS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 10_000 {
			b.Fatalf("PARSLEY_SCALE_KEYS=%q: want an integer of at least 10000", s)
		}
		big = n
	}
	for _, p := range []int32{1, 4, 16} {
		b.Run(fmt.Sprintf("partitions=%d", p), func(b *testing.B) {
			compare(b, workload{records: benchLoad.records, partitions: p, keys: benchLoad.keys}, false)
		})
	}
	for _, w := range []int{8, 64, 200} {
		b.Run(fmt.Sprintf("width=%d", w), func(b *testing.B) {
			compare(b, workload{records: benchLoad.records, partitions: benchLoad.partitions, keys: benchLoad.keys, width: w}, false)
		})
	}
	// The same number of records at both points, so only the state's size
	// changes: at the larger point every record touches a new key.
	for _, k := range []int{10_000, big} {
		b.Run(fmt.Sprintf("keys=%d", k), func(b *testing.B) {
			compare(b, workload{records: big, partitions: benchLoad.partitions, keys: k}, true)
		})
	}
	for _, k := range []int{big / 10, big} {
		b.Run(fmt.Sprintf("restore=%d", k), func(b *testing.B) { benchRestore(b, k) })
	}
	for _, n := range []int{big / 10, big} {
		b.Run(fmt.Sprintf("held=%d", n), func(b *testing.B) { benchHeld(b, n) })
	}
}

// benchRestore writes a changelog of keys distinct keys (8-byte values, as
// the Int64 state codec writes) and restores it into an empty store. The
// control reads the same records with a plain consumer and does nothing
// with them: the ratio is the share of a restore's time that is reading.
func benchRestore(b *testing.B, keys int) {
	var ctrl, restore run
	var peak int64 // the most the resident set rose during a restore
	for range b.N {
		e := newEnv(b, broker.Topic{Name: "cl", Partitions: 1, Configs: compact})
		cl, err := e.c.NewClient(kgo.ProducerLinger(5*time.Millisecond), kgo.MaxBufferedRecords(100_000),
			kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		for i := range keys {
			v := binary.BigEndian.AppendUint64(nil, uint64(i))
			cl.Produce(ctx, &kgo.Record{Topic: "cl", Key: fmt.Appendf(nil, "\x02k%d", i), Value: v}, func(_ *kgo.Record, err error) {
				if err != nil {
					b.Error(err)
				}
			})
		}
		if err := cl.Flush(ctx); err != nil {
			b.Fatal(err)
		}
		cl.Close()

		ctrl.add(readAll(b, e, "cl", keys))

		st, err := state.Open(ctx, filepath.Join(b.TempDir(), "restore.db"))
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		resetPeakResident(b)
		rss0 := residentBytes(b)
		t0, c0 := time.Now(), cpuTime(b)
		newClient := func(opts ...kgo.Opt) (*kgo.Client, error) { return e.c.NewClient(opts...) }
		if _, err := state.Restore(ctx, e.c.Admin(), newClient, "cl", 0, st, nil); err != nil {
			b.Fatal(err)
		}
		restore.add(run{wall: time.Since(t0), cpu: cpuTime(b) - c0})
		peak = max(peak, peakResident(b)-rss0)
		if st.Checkpoint() != int64(keys) {
			b.Fatalf("restored to checkpoint %d, want %d", st.Checkpoint(), keys)
		}
		st.Close()
	}
	n := float64(keys * b.N)
	b.ReportMetric(n/ctrl.wall.Seconds(), "read-rec/s")
	b.ReportMetric(n/restore.wall.Seconds(), "restore-rec/s")
	b.ReportMetric(restore.wall.Seconds()/float64(b.N), "restore-s")
	b.ReportMetric(ctrl.wall.Seconds()/restore.wall.Seconds(), "ratio")
	b.ReportMetric(ctrl.cpu.Seconds()/restore.cpu.Seconds(), "cpu-ratio")
	b.ReportMetric(float64(peak)/(1<<20), "peak-rise-MiB")
}

// readAll reads n records of topic from its start with a plain
// read-committed consumer.
func readAll(b *testing.B, e *env, topic string, n int) run {
	cl, err := e.c.NewClient(kgo.ConsumeTopics(topic), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	t0, c0 := time.Now(), cpuTime(b)
	for got := 0; got < n; {
		fs := cl.PollFetches(context.Background())
		if err := fs.Err(); err != nil {
			b.Fatal(err)
		}
		got += fs.NumRecords()
	}
	return run{wall: time.Since(t0), cpu: cpuTime(b) - c0}
}

// benchHeld feeds n records that all wait for a cause that never arrives
// into a node over a task's SQLite store, committing every 10,000 as a
// step does, and reports the Go heap and the resident memory the process
// gained per held record. There is no control: a plain consumer holds
// nothing.
func benchHeld(b *testing.B, n int) {
	for range b.N {
		ctx := context.Background()
		st, err := state.Open(ctx, filepath.Join(b.TempDir(), "held.db"))
		if err != nil {
			b.Fatal(err)
		}
		cause := headers.Channel{Topic: headers.TopicID{0x11}}
		held := headers.Channel{Topic: headers.TopicID{0x22}}
		var c headers.Clock
		c.SetOffset(cause, 0) // never delivered: everything on held waits
		for i := 1; i < 8; i++ {
			c.SetOffset(headers.Channel{Topic: headers.TopicID{0x70}, Partition: int32(i)}, int64(1000+i))
		}
		vc, err := headers.EncodeVC(&c)
		if err != nil {
			b.Fatal(err)
		}
		batch := protocol.NewBatch(st)
		node, err := protocol.New(ctx, protocol.Config{
			ApplicationID: "scale", Stage: "held", Inputs: []headers.Channel{cause, held},
			Store: batch, Offsets: noOffsets{},
		})
		if err != nil {
			b.Fatal(err)
		}
		heap0, rss0 := heapAlloc(), residentBytes(b)
		t0 := time.Now()
		r := protocol.Record{
			Coordinate: headers.Coordinate{Channel: held},
			Key:        []byte("key"), Value: bytes.Repeat([]byte{'v'}, 100),
			Headers: []headers.Header{{Key: headers.HeaderVC, Value: vc}},
		}
		commit := func(at int) {
			if err := node.Flush(); err != nil {
				b.Fatal(err)
			}
			if err := st.Apply(ctx, batch.Mutations(), int64(at), time.Time{}); err != nil {
				b.Fatal(err)
			}
			batch.Discard()
		}
		for i := range n {
			r.Offset = int64(i)
			if ds, err := node.OnRecord(&r); err != nil || len(ds) != 0 {
				b.Fatalf("record %d: delivered %d, %v", i, len(ds), err)
			}
			if i%10_000 == 9_999 {
				commit(i)
			}
		}
		commit(n)
		wall := time.Since(t0)
		if h := node.Counters().Held; h != n {
			b.Fatalf("held %d, want %d", h, n)
		}
		heap1, rss1 := heapAlloc(), residentBytes(b)
		b.ReportMetric(float64(int64(heap1)-int64(heap0))/float64(n), "heapB/held")
		b.ReportMetric(float64(rss1-rss0)/float64(n), "rssB/held")
		b.ReportMetric(float64(rss1)/(1<<20), "rss-MiB")
		b.ReportMetric(float64(n)/wall.Seconds(), "held-rec/s")
		runtime.KeepAlive(node)
		st.Close()
	}
}

// noOffsets answers a node that has no sinks and never sweeps.
type noOffsets struct{}

func (noOffsets) EndOffsets(context.Context, headers.TopicID) ([]int64, bool, error) {
	return []int64{0}, true, nil
}

func (noOffsets) LogStarts(context.Context, headers.TopicID) ([]int64, bool, error) {
	return []int64{0}, true, nil
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// residentBytes is the process's resident set size (Linux: /proc/self/statm).
func residentBytes(b *testing.B) int64 {
	s, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		b.Skipf("resident memory unknown here: %v", err)
	}
	var size, rss int64
	if _, err := fmt.Sscan(string(s), &size, &rss); err != nil {
		b.Fatal(err)
	}
	return rss * int64(os.Getpagesize())
}
