package protocol

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
)

// nullStore keeps nothing and counts writes: the node's own costs, without
// a store's, for the memory and flush benchmarks (a real store is disk).
type nullStore struct{ puts, deletes, bytes int }

func (s *nullStore) Get(string) ([]byte, bool, error) { return nil, false, nil }
func (s *nullStore) Put(_ string, v []byte) error     { s.puts++; s.bytes += len(v); return nil }
func (s *nullStore) Delete(string) error              { s.deletes++; return nil }
func (s *nullStore) Scan(string, func(string, []byte) error) error {
	return nil
}

// wideClaims returns claims on `width` channels: the given consumed ones at
// the given offsets, then unconsumed ones.
func wideClaims(width int, consumed ...headers.OffsetEntry) st {
	var s st
	s.offs = append(s.offs, consumed...)
	for i := 0; len(s.offs) < width; i++ {
		s.offs = append(s.offs, off(headers.Channel{Topic: tid(200), Partition: int32(i)}, int64(1000+i)))
	}
	return s
}

// BenchmarkOnRecordNonHolding: records on 4 channels, each carrying an
// 8-entry clock (claims on the 3 other consumed channels, already satisfied,
// and 5 unconsumed channels) and a sender tag, every one delivered on
// arrival. flushEvery=0 reports ns/OnRecord and its ratio to decoding the
// same stamps (the control, interleaved); flushEvery=100 adds a Flush every
// 100 records, as a host's step would.
func BenchmarkOnRecordNonHolding(b *testing.B) {
	chans := []headers.Channel{a0, b0, c0, chn(4, 0)}
	for _, v := range []struct{ flushEvery, custody int }{{0, 0}, {100, 0}, {0, 200}} {
		flushEvery := v.flushEvery
		name := fmt.Sprintf("flushEvery=%d", flushEvery)
		if v.custody > 0 {
			name += fmt.Sprintf("/custody=%d", v.custody)
		}
		b.Run(name, func(b *testing.B) {
			e := newEnv(b, chans, nil)
			n := e.node()
			if v.custody > 0 {
				// A stamp-side clock already this wide, from an earlier record.
				w := wideClaims(v.custody)
				for i := range w.offs {
					w.offs[i].Channel.Topic[0] = 0x05 // sorts before every claim of the records below
				}
				feed(b, n, rec(b, chans[0], 0, w))
			}
			recs := make([]*Record, len(chans))
			for _, ch := range chans[1:] {
				feed(b, n, plain(ch, 0))
			}
			if v.custody == 0 {
				feed(b, n, plain(chans[0], 0))
			}
			for i, ch := range chans {
				var claims []headers.OffsetEntry
				for _, o := range chans {
					if o != ch {
						claims = append(claims, off(o, 0))
					}
				}
				s := headers.SenderID{byte(i + 1)}
				w := wideClaims(8, claims...)
				w.sender = &s
				recs[i] = rec(b, ch, 1, w)
				if _, err := n.OnRecord(recs[i]); err != nil {
					b.Fatal(err)
				}
			}
			flush(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			if flushEvery == 0 {
				// Interleave the subject with its control (decoding the same
				// stamps) in blocks of 1,000, so load on the shared machine
				// hits both alike, and report the ratio.
				var s headers.Stamp
				var subj, ctrl time.Duration
				done := 0
				for done < b.N {
					k := min(1000, b.N-done)
					t0 := time.Now()
					for i := range k {
						if err := headers.ReadStamp(&s, recs[(done+i)%len(recs)].Headers); err != nil {
							b.Fatal(err)
						}
					}
					t1 := time.Now()
					for i := range k {
						r := recs[(done+i)%len(recs)]
						r.Offset++
						if ds, err := n.OnRecord(r); err != nil || len(ds) != 1 {
							b.Fatalf("%v %v", coords(ds), err)
						}
					}
					ctrl += t1.Sub(t0)
					subj += time.Since(t1)
					done += k
				}
				b.ReportMetric(float64(subj.Nanoseconds())/float64(b.N), "ns/OnRecord")
				b.ReportMetric(float64(subj)/float64(ctrl), "x-ReadStamp")
				return
			}
			for i := range b.N {
				r := recs[i%len(recs)]
				r.Offset++
				ds, err := n.OnRecord(r)
				if err != nil || len(ds) != 1 {
					b.Fatalf("%v %v", coords(ds), err)
				}
				if flushEvery > 0 && i%flushEvery == flushEvery-1 {
					if err := n.Flush(); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// BenchmarkCascade: each op holds k records behind one missing cause,
// flushes (so each held record is read back from the store when it becomes
// the head), and releases them all with the cause's arrival in one
// OnRecord. ns/op covers the whole cycle; ns/release times the releasing
// OnRecord alone, per released record. Linear cost means ns/release does not
// grow with k. In the queue variant all k wait on one channel; in the chain
// variant they are spread over 4 channels, each claiming the one before,
// against channel order: the cascade's worst case, one pass per release.
func BenchmarkCascade(b *testing.B) {
	chans := []headers.Channel{a0, b0, c0, chn(4, 0)}
	cause := chn(5, 0)
	for _, k := range []int{10, 100, 1000, 10000} {
		for _, shape := range []string{"queue", "chain"} {
			b.Run(fmt.Sprintf("%s/k=%d", shape, k), func(b *testing.B) {
				e := newEnv(b, append([]headers.Channel{cause}, chans...), nil)
				n := e.node()
				var offs [4]int64
				var causeOff int64
				val := make([]byte, 100)
				var released time.Duration
				total := 0
				b.ReportAllocs()
				for range b.N {
					prev := off(cause, causeOff)
					for j := range k {
						ci := 1
						if shape == "chain" {
							ci = 3 - j%4
						}
						w := wideClaims(8, prev)
						r := &Record{Coordinate: at(chans[ci], offs[ci]), Value: val, Headers: w.headers(b)}
						if shape == "chain" {
							prev = off(chans[ci], offs[ci])
						}
						offs[ci]++
						if _, err := n.OnRecord(r); err != nil {
							b.Fatal(err)
						}
					}
					flush(b, n)
					start := time.Now()
					ds, err := n.OnRecord(plain(cause, causeOff))
					released += time.Since(start)
					if err != nil || len(ds) != k+1 {
						b.Fatalf("released %d, %v", len(ds), err)
					}
					total += k
					causeOff++
					flush(b, n)
				}
				b.ReportMetric(float64(released.Nanoseconds())/float64(total), "ns/release")
			})
		}
	}
}

// BenchmarkPrepareSend: a stamp of 200 offset entries (4 frontier entries,
// the rest folded from received clocks) plus a sequence claim on the other
// sink. A fresh incarnation has no own outputs to claim by offset: since
// #14 those are the acknowledged sends of earlier incarnations.
func BenchmarkPrepareSend(b *testing.B) {
	S, T := chn(31, 0), chn(32, 0)
	chans := []headers.Channel{a0, b0, c0, chn(4, 0)}
	e := newEnv(b, chans, []headers.TopicID{S.Topic, T.Topic})
	e.offs.ends[S.Topic] = []int64{50}
	e.offs.ends[T.Topic] = []int64{60}
	n := e.node()
	for i, ch := range chans {
		w := wideClaims(200 - 4)
		for j := range w.offs {
			w.offs[j].Offset += int64(i)
		}
		if _, err := n.OnRecord(rec(b, ch, 3, w)); err != nil {
			b.Fatal(err)
		}
	}
	prepare(b, n, T)
	if s := prepare(b, n, S); s.Clock.NumOffsets() != 200 || s.Clock.NumSeqs() != 1 {
		b.Fatalf("stamp has %d offset and %d sequence entries", s.Clock.NumOffsets(), s.Clock.NumSeqs())
	}
	b.Run("into", func(b *testing.B) {
		var s headers.Stamp
		b.ReportAllocs()
		for b.Loop() {
			if err := n.PrepareSendInto(&s, S); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("new", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := n.PrepareSend(S); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func heldCount(b *testing.B) int {
	if s := os.Getenv("PARSLEY_BENCH_HELD"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		return v
	}
	return 1_000_000
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkHeldRecordHeap: the heap a node keeps per held record, over
// PARSLEY_BENCH_HELD (default 1,000,000) records held behind a cause that
// never arrives, flushed every 10,000, at clock widths 8 and 200. The store
// keeps nothing (a real one is on disk), so the figure is the node's own.
// Run it with -benchtime=1x.
func BenchmarkHeldRecordHeap(b *testing.B) {
	total := heldCount(b)
	for _, width := range []int{8, 200} {
		b.Run(fmt.Sprintf("width=%d", width), func(b *testing.B) {
			for range b.N {
				s := headers.SenderID{1}
				w := wideClaims(width, off(a0, 0))
				w.sender = &s
				hs := w.headers(b)
				e := newEnv(b, []headers.Channel{a0, b0}, nil)
				ns := &nullStore{}
				e.cfg.Store = ns
				n := e.node()
				before := heapInUse()
				r := &Record{Coordinate: at(b0, 0), Key: []byte("key"), Value: make([]byte, 100), Headers: hs}
				for i := range total {
					r.Offset = int64(i)
					if _, err := n.OnRecord(r); err != nil {
						b.Fatal(err)
					}
					if i%10_000 == 9_999 {
						flush(b, n)
					}
				}
				flush(b, n)
				after := heapInUse()
				if c := n.Counters(); c.Held != total {
					b.Fatalf("held %d", c.Held)
				}
				b.ReportMetric(float64(after-before)/float64(total), "heapB/held")
				runtime.KeepAlive(n)
			}
		})
	}
}

// BenchmarkFlush: the cost of a step that holds 100 more records and
// flushes, with 10,000 or 1,000,000 records already held. The store keeps
// nothing, so the figure is the node's work; writes per flush are reported.
func BenchmarkFlush(b *testing.B) {
	for _, depth := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprintf("held=%d", depth), func(b *testing.B) {
			hs := wideClaims(8, off(a0, 0)).headers(b)
			e := newEnv(b, []headers.Channel{a0, b0}, nil)
			ns := &nullStore{}
			e.cfg.Store = ns
			n := e.node()
			r := &Record{Coordinate: at(b0, 0), Key: []byte("key"), Value: make([]byte, 100), Headers: hs}
			o := int64(0)
			for range depth {
				r.Offset = o
				o++
				if _, err := n.OnRecord(r); err != nil {
					b.Fatal(err)
				}
			}
			flush(b, n)
			ns.puts = 0
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				for range 100 {
					r.Offset = o
					o++
					if _, err := n.OnRecord(r); err != nil {
						b.Fatal(err)
					}
				}
				if err := n.Flush(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(ns.puts)/float64(b.N), "puts/flush")
		})
	}
}
