package clock_test

import (
	"testing"
	"time"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
)

const benchWidth = 200

// wideClock returns a clock with n offset entries, 20 topics of n/20
// partitions, the shape of a producer downstream of a few wide topics.
func wideClock(n int) *headers.Clock {
	c := new(headers.Clock)
	for i := range n {
		c.SetOffset(ch(headers.TopicID{1, byte(i / 20)}, int32(i%20)), int64(1000+i))
	}
	return c
}

func benchClock(b testing.TB, opts ...clock.Option) (*clock.Clock, *broker.Cluster) {
	c := broker.New(b, broker.Topics(broker.Topic{Name: "bench"}))
	clk := clock.New(c.Admin(), opts...)
	for e := range wideClock(benchWidth).OffsetEntries() {
		if err := clk.ProducedAt(headers.Coordinate{Channel: e.Channel, Offset: e.Offset}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := clk.Resolver().TopicID(testCtx(b), "bench"); err != nil {
		b.Fatal(err)
	}
	return clk, c
}

// BenchmarkStamp stamps a fresh record with a 200-entry clock.
//
//   - unchanged: the clock did not change since the last stamp (a consumer
//     fanning one input out to many records): resolver cache hit and the
//     shared encoding.
//   - after-fold: a send is folded before each stamp (the sequential
//     producer): the fold, then a full encode.
//   - control-EncodeVC: the bare encoder over the same clock, in the same
//     process with the cluster up, so after-fold/control is the clock's
//     own overhead.
func BenchmarkStamp(b *testing.B) {
	for _, d := range []headers.Dialect{headers.DialectVC, headers.DialectCauses} {
		b.Run(d.String()+"/unchanged", func(b *testing.B) {
			clk, _ := benchClock(b, clock.Dialect(d))
			ctx := testCtx(b)
			rec := &kgo.Record{Topic: "bench"}
			b.ReportAllocs()
			for b.Loop() {
				rec.Headers = nil
				if err := clk.Stamp(ctx, rec); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(d.String()+"/after-fold", func(b *testing.B) {
			clk, _ := benchClock(b, clock.Dialect(d))
			ctx := testCtx(b)
			rec := &kgo.Record{Topic: "bench"}
			at := headers.Coordinate{Channel: ch(headers.TopicID{1, 3}, 7), Offset: 5000}
			b.ReportAllocs()
			for b.Loop() {
				at.Offset++
				if err := clk.ProducedAt(at); err != nil {
					b.Fatal(err)
				}
				rec.Headers = nil
				if err := clk.Stamp(ctx, rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("control-EncodeVC", func(b *testing.B) {
		benchClock(b) // the same background load as above
		c := wideClock(benchWidth)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := headers.EncodeVC(c); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkObserve folds a consumed record carrying a 200-entry clock. The
// control is decoding the same headers alone.
func BenchmarkObserve(b *testing.B) {
	for _, d := range []headers.Dialect{headers.DialectVC, headers.DialectCauses} {
		b.Run(d.String(), func(b *testing.B) {
			clk, _ := benchClock(b)
			var s headers.Stamp
			s.Clock.CopyFrom(wideClock(benchWidth))
			hs, err := headers.AppendStamp[kgo.RecordHeader](nil, &s, d)
			if err != nil {
				b.Fatal(err)
			}
			rec := &kgo.Record{Topic: "bench", Offset: 7, Headers: hs}
			b.ReportAllocs()
			for b.Loop() {
				if err := clk.Observe(rec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("control-ReadStamp", func(b *testing.B) {
		benchClock(b) // the same background load as above
		var s headers.Stamp
		s.Clock.CopyFrom(wideClock(benchWidth))
		hs, err := headers.AppendStamp[kgo.RecordHeader](nil, &s, headers.DialectVC)
		if err != nil {
			b.Fatal(err)
		}
		var out headers.Stamp
		b.ReportAllocs()
		for b.Loop() {
			if err := headers.ReadStamp(&out, hs); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkStampRatio interleaves a fold-then-stamp with the bare encoder
// over a clock of the same width, timing each, and reports their ratio:
// on a shared machine the load moves both alike, so the ratio holds where
// the absolute figures do not.
func BenchmarkStampRatio(b *testing.B) {
	clk, _ := benchClock(b)
	ctx := testCtx(b)
	control := wideClock(benchWidth)
	rec := &kgo.Record{Topic: "bench"}
	at := headers.Coordinate{Channel: ch(headers.TopicID{1, 3}, 7), Offset: 5000}
	var stamp, encode time.Duration
	doStamp := func() {
		t0 := time.Now()
		at.Offset++
		if err := clk.ProducedAt(at); err != nil {
			b.Fatal(err)
		}
		rec.Headers = nil
		if err := clk.Stamp(ctx, rec); err != nil {
			b.Fatal(err)
		}
		stamp += time.Since(t0)
	}
	doEncode := func() {
		t0 := time.Now()
		if _, err := headers.EncodeVC(control); err != nil {
			b.Fatal(err)
		}
		encode += time.Since(t0)
	}
	// Alternate which goes first, so neither always pays for the other's
	// garbage or cache misses.
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			doStamp()
			doEncode()
		} else {
			doEncode()
			doStamp()
		}
	}
	b.ReportMetric(float64(stamp)/float64(encode), "stamp/encode")
	b.ReportMetric(float64(stamp.Nanoseconds())/float64(b.N), "stamp-ns/op")
	b.ReportMetric(float64(encode.Nanoseconds())/float64(b.N), "encode-ns/op")
}
