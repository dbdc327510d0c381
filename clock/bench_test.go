package clock_test

import (
	"testing"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/broker"
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

func benchClock(b *testing.B, opts ...clock.Option) (*clock.Clock, *broker.Cluster) {
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
			clk, _ := benchClock(b, clock.WithDialect(d))
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
			clk, _ := benchClock(b, clock.WithDialect(d))
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
