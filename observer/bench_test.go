package observer

import (
	"context"
	"io"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
)

// synthetic returns n tagged records on channel 0 of topic "bench", each
// stamped with entries offset entries: one on the previous record of its
// own channel, so the records form a chain, and entries-1 on other
// channels, of which changed-1 advance with every record (the inputs a
// stage just consumed) and the rest stay put (inputs that were quiet).
func synthetic(n, entries, changed int) []incoming {
	self := headers.Channel{Topic: headers.TopicID{0xbe, 0xec}, Partition: 0}
	sender := headers.SenderID{0x5e, 1}
	out := make([]incoming, n)
	for i := range n {
		st := headers.Stamp{Tagged: true, Sender: sender, Seq: int64(i + 1)}
		if i > 0 {
			st.Clock.SetOffset(self, int64(i-1))
		}
		for p := 1; p < entries; p++ {
			v := int64(0)
			if p < changed {
				v = int64(i)
			}
			st.Clock.SetOffset(headers.Channel{Topic: headers.TopicID{0xbe, 0xed}, Partition: int32(p)}, v)
		}
		hs, err := headers.AppendStamp([]headers.Header(nil), &st, headers.DialectVC)
		if err != nil {
			panic(err)
		}
		if entries == 0 {
			hs = nil
		}
		out[i] = incoming{Channel: self, Topic: "bench", Offset: int64(i), Timestamp: int64(i), Headers: hs}
	}
	return out
}

// transactional makes recs the output of a stage under exactly-once: each
// run of txn records is one transaction of producer 7, followed by its
// commit marker, which takes the next offset. Offsets and stamps' own
// claims shift to make room for the markers.
func transactional(recs []incoming, txn int) []incoming {
	var out []incoming
	var off int64
	for i, r := range recs {
		r.Offset, r.Transactional, r.ProducerID = off, true, 7
		out = append(out, r)
		off++
		if (i+1)%txn == 0 {
			out = append(out, incoming{Channel: r.Channel, Topic: r.Topic, Offset: off, Timestamp: r.Timestamp, Control: true, Commit: true,
				Transactional: true, ProducerID: 7, Key: []byte{0, 0, 0, 1}})
			off++
		}
	}
	return out
}

func benchStore(b *testing.B) (*Store, *writer) {
	ctx := context.Background()
	st, err := OpenStore(ctx, filepath.Join(b.TempDir(), "bench.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	w, err := newWriter(ctx, st)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(w.close)
	return st, w
}

// BenchmarkIngest stores records in batches of 1,000, as one poll of a
// lightly loaded observer brings them, and of 10,000, the most one poll
// brings (PollRecords(10000)), as every poll does for an observer that
// cannot keep up: the batch that bounds its throughput. 16-entry stamps,
// with 2 or all 16 entries advancing per record, as a stage's output and
// under exactly-once (a commit marker after every 100 records); unstamped
// records as the control.
func BenchmarkIngest(b *testing.B) {
	for _, bc := range []struct {
		name             string
		entries, changed int
		txn              int // records per transaction; 0: not transactional
		batch            int
	}{
		{"unstamped/batch=1000", 0, 0, 0, 1000},
		{"entries=16,changed=2/batch=1000", 16, 2, 0, 1000},
		{"entries=16,changed=16/batch=1000", 16, 16, 0, 1000},
		{"entries=16,changed=2,txn=100/batch=1000", 16, 2, 100, 1000},
		{"unstamped/batch=10000", 0, 0, 0, 10000},
		{"entries=16,changed=2/batch=10000", 16, 2, 0, 10000},
		{"entries=16,changed=16/batch=10000", 16, 16, 0, 10000},
		{"entries=16,changed=2,txn=100/batch=10000", 16, 2, 100, 10000},
	} {
		b.Run(bc.name, func(b *testing.B) {
			batch := bc.batch
			recs := synthetic(batch*20, bc.entries, bc.changed)
			if bc.txn > 0 {
				recs = transactional(recs, bc.txn)
				recs = recs[:len(recs)-len(recs)%batch]
			}
			_, w := benchStore(b)
			ctx := context.Background()
			b.ReportAllocs()
			n := 0
			cpu0 := cpuTime()
			for b.Loop() {
				if n+batch > len(recs) {
					// Continue the channel beyond the prepared records.
					for i := range recs {
						recs[i].Offset += int64(len(recs))
					}
					n = 0
				}
				if err := w.ingest(ctx, recs[n:n+batch]); err != nil {
					b.Fatal(err)
				}
				n += batch
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "records/s")
			// The process's CPU time, all threads (the GC's too): on a
			// machine others load, records per CPU-second moves far less
			// than records per second.
			b.ReportMetric(float64(b.N*batch)/(cpuTime()-cpu0).Seconds(), "records/cpu-s")
		})
	}
}

// BenchmarkExplain walks a 1,009-record ancestry and renders it as a
// tree: 16 channels of 64 records each, every record's 16-entry stamp
// claiming the previous record of every channel, so the last record of
// channel 0 descends from 63 records of each channel.
func BenchmarkExplain(b *testing.B) {
	st, w := benchStore(b)
	ctx := context.Background()
	const chans, depth = 16, 64
	ch := func(p int) headers.Channel { return headers.Channel{Topic: headers.TopicID{0xe7}, Partition: int32(p)} }
	var recs []incoming
	for i := range depth {
		for p := range chans {
			var st headers.Stamp
			if i > 0 {
				for q := range chans {
					st.Clock.SetOffset(ch(q), int64(i-1))
				}
			}
			hs, err := headers.AppendStamp([]headers.Header(nil), &st, headers.DialectVC)
			if err != nil {
				b.Fatal(err)
			}
			recs = append(recs, incoming{Channel: ch(p), Topic: "grid", Offset: int64(i), Timestamp: int64(i), Headers: hs})
		}
	}
	if err := w.ingest(ctx, recs); err != nil {
		b.Fatal(err)
	}
	last := headers.Coordinate{Channel: ch(0), Offset: depth - 1}
	b.ReportAllocs()
	for b.Loop() {
		g, err := st.Ancestry(ctx, last, Limits{})
		if err != nil {
			b.Fatal(err)
		}
		if len(g.Nodes) != 1+chans*(depth-1) || len(g.Edges) != chans*chans*(depth-2)+chans || g.Truncated {
			b.Fatalf("ancestry has %d nodes and %d edges (truncated %v)", len(g.Nodes), len(g.Edges), g.Truncated)
		}
		if err := g.WriteTree(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFindings evaluates every finding over 100,000 stored records
// with 16-entry stamps (2 entries advancing per record).
func BenchmarkFindings(b *testing.B) {
	st, w := benchStore(b)
	ctx := context.Background()
	recs := synthetic(100_000, 16, 2)
	for i := 0; i < len(recs); i += 1000 {
		if err := w.ingest(ctx, recs[i:i+1000]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		fs, err := st.Findings(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		if len(fs) != 0 {
			b.Fatalf("findings on a clean synthetic log: %v", fs)
		}
	}
}

// cpuTime is the CPU time the process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
