package stage

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
)

// aheadWindow is a fetched partition's records with what decoding ahead
// must cope with: gaps in the offsets, a control record, nil keys and
// values, a value the codec refuses and one that makes it panic.
func aheadWindow() []*kgo.Record {
	var recs []*kgo.Record
	add := func(off int64, key, value []byte) *kgo.Record {
		r := &kgo.Record{Offset: off, Key: key, Value: value}
		recs = append(recs, r)
		return r
	}
	for i := range 40 {
		add(int64(10+2*i), fmt.Appendf(nil, "k%d", i), strconv.AppendInt(nil, int64(i*i), 10))
	}
	add(90, nil, []byte("5"))
	add(91, []byte("tombstone"), nil)
	add(92, nil, nil)
	ctl := add(93, nil, nil)
	ctl.Attrs = kgo.NewRecordAttrs(kgo.RecordAttrsOpts{Control: true})
	add(94, []byte("k-bad"), []byte("bad"))
	add(95, []byte("k-boom"), []byte("boom"))
	for i := range 20 {
		add(int64(96+i), fmt.Appendf(nil, "t%d", i), strconv.AppendInt(nil, int64(i), 10))
	}
	return recs
}

// aheadTopic decodes int64 values from decimal text; "bad" fails and
// "boom" panics, as a user codec may.
func aheadTopic(decodes *atomic.Int64) *Topic[string, int64] {
	return NewTopic("in", String(), Of(
		func(v int64) ([]byte, error) { return strconv.AppendInt(nil, v, 10), nil },
		func(b []byte) (int64, error) {
			decodes.Add(1)
			switch string(b) {
			case "boom":
				panic("codec exploded")
			case "bad":
				return 0, errors.New("not a number")
			}
			return strconv.ParseInt(string(b), 10, 64)
		}))
}

// inlineDecode is what delivery decodes without a worker: the reference.
func inlineDecode(t *Topic[string, int64], r *kgo.Record) (Message[string, int64], error) {
	return decodeCaught(t, &rawMessage{topic: "in", offset: r.Offset, key: r.Key, value: r.Value})
}

// feedAt moves the cursor to record i of its window, as feed does, and
// returns the delivery of that record as deliver builds it.
func feedAt(c *aheadCursor, i int, r *kgo.Record) rawMessage {
	c.at, c.offset = i, r.Offset
	return rawMessage{topic: "in", offset: r.Offset, key: r.Key, value: r.Value, ahead: c.dec, aheadAt: c.locate(c.topic, r.Offset)}
}

// decodeCaught is the handler side's decode, a panic caught as invoke
// catches it.
func decodeCaught(t *Topic[string, int64], m *rawMessage) (msg Message[string, int64], err error) {
	defer catch(&err)
	return decode(t, m)
}

// sameDecoding fails unless got and want are the same message and the same
// error (by type and, for codec errors, by the part that failed).
func sameDecoding(t *testing.T, off int64, got, want Message[string, int64], gerr, werr error) {
	t.Helper()
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("offset %d: error %v, inline decoding gives %v", off, gerr, werr)
	}
	if werr != nil {
		var gc, wc *CodecError
		var gp, wp *PanicError
		switch {
		case errors.As(werr, &wc):
			if !errors.As(gerr, &gc) || gc.Topic != wc.Topic || gc.Part != wc.Part || gc.Op != wc.Op || gc.Err.Error() != wc.Err.Error() {
				t.Fatalf("offset %d: error %#v, inline decoding gives %#v", off, gerr, werr)
			}
		case errors.As(werr, &wp):
			if !errors.As(gerr, &gp) || fmt.Sprint(gp.Value) != fmt.Sprint(wp.Value) {
				t.Fatalf("offset %d: error %v, inline decoding gives %v", off, gerr, werr)
			}
		default:
			t.Fatalf("offset %d: inline decoding gives an unexpected error %v", off, werr)
		}
		return
	}
	if got.Key != want.Key || got.Value != want.Value || got.KeyIsNil != want.KeyIsNil || got.ValueIsNil != want.ValueIsNil || got.Offset != want.Offset {
		t.Fatalf("offset %d: decoded %+v, inline decoding gives %+v", off, got, want)
	}
}

// TestDecodeAheadMatchesInline: a record decoded by a worker reaches the
// handler exactly as one decoded at its delivery, errors and panics
// included, and each record is decoded once.
func TestDecodeAheadMatchesInline(t *testing.T) {
	var decodes atomic.Int64
	top := aheadTopic(&decodes)
	recs := aheadWindow()
	a := aheadOf(top)().(*typedAhead[string, int64])
	a.reset(recs)
	var stop atomic.Bool
	a.work(&stop) // every record decoded before its delivery
	valued := 0
	for _, r := range recs {
		if r.Value != nil && !r.Attrs.IsControl() {
			valued++
		}
	}
	if got := decodes.Load(); got != int64(valued) {
		t.Fatalf("the worker decoded %d values, want %d (one per record with a value, none for the control record)", got, valued)
	}
	c := aheadCursor{dec: a, topic: headers.TopicID{1}}
	for i, r := range recs {
		if r.Attrs.IsControl() {
			continue
		}
		m := feedAt(&c, i, r)
		if m.aheadAt != i {
			t.Fatalf("offset %d: located at %d, want %d", r.Offset, m.aheadAt, i)
		}
		before := decodes.Load()
		got, gerr := decodeCaught(top, &m)
		if decodes.Load() != before {
			t.Fatalf("offset %d: decoded again at delivery although the worker had done it", r.Offset)
		}
		want, werr := inlineDecode(top, r)
		sameDecoding(t, r.Offset, got, want, gerr, werr)
	}
	a.clear()
	if a.window() != nil || len(a.slots) != 0 {
		t.Fatal("clear left the window or decoded values behind")
	}
}

// TestDecodeAheadCursorLocates: the delivery of the record being fed finds
// its decoding at the cursor; a released record of the same window by its
// offset; anything else (another source, an offset of an earlier step, an
// offset in a gap) decodes at delivery.
func TestDecodeAheadCursorLocates(t *testing.T) {
	var decodes atomic.Int64
	recs := aheadWindow()
	a := aheadOf(aheadTopic(&decodes))()
	a.reset(recs)
	src, other := headers.TopicID{1}, headers.TopicID{2}
	c := aheadCursor{dec: a, topic: src, at: 30, offset: recs[30].Offset}
	for _, tc := range []struct {
		name   string
		topic  headers.TopicID
		offset int64
		want   int
	}{
		{"the record being fed", src, recs[30].Offset, 30},
		{"a record released from earlier in the window", src, recs[3].Offset, 3},
		{"the window's first record", src, recs[0].Offset, 0},
		{"the window's last record", src, recs[len(recs)-1].Offset, len(recs) - 1},
		{"an offset in a gap of the window", src, 11, -1},
		{"an offset of an earlier step", src, 5, -1},
		{"an offset past the window", src, 1000, -1},
		{"another source", other, recs[30].Offset, -1},
	} {
		if got := c.locate(tc.topic, tc.offset); got != tc.want {
			t.Errorf("%s: located at %d, want %d", tc.name, got, tc.want)
		}
	}
	if got := (&aheadCursor{}).locate(src, recs[0].Offset); got != -1 {
		t.Errorf("no window: located at %d, want -1", got)
	}
}

// TestDecodeAheadConcurrent: workers and the step goroutine race over one
// window (run it with -race): whatever each record's decoding took, the
// handler sees inline decoding's result, and no record is decoded by more
// than one side unless the step goroutine met it while a worker was at it.
func TestDecodeAheadConcurrent(t *testing.T) {
	for _, workers := range []int{1, 2, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			var decodes atomic.Int64
			top := aheadTopic(&decodes)
			recs := aheadWindow()
			d := decodeAhead{workers: workers}
			defer d.close()
			for range 50 {
				dec := aheadOf(top)()
				d.add(dec, recs)
				d.add(dec, recs[:3]) // a second window of the same source is not taken
				if len(d.wins) != 1 {
					t.Fatalf("%d windows, want 1", len(d.wins))
				}
				d.start()
				c := aheadCursor{dec: dec, topic: headers.TopicID{1}}
				for i, r := range recs {
					if r.Attrs.IsControl() {
						continue
					}
					m := feedAt(&c, i, r)
					got, gerr := decodeCaught(top, &m)
					want, werr := inlineDecode(top, r)
					sameDecoding(t, r.Offset, got, want, gerr, werr)
				}
				d.finish()
				if dec.window() != nil || len(d.wins) != 0 {
					t.Fatal("finish left a window behind")
				}
			}
		})
	}
}

// slowCodec decodes decimal text slowly and keeps the most decodes that
// ever ran at once.
type slowCodec struct {
	running, most atomic.Int32
}

func (c *slowCodec) codec() Codec[int64] {
	return Of(func(v int64) ([]byte, error) { return strconv.AppendInt(nil, v, 10), nil },
		func(b []byte) (int64, error) {
			n := c.running.Add(1)
			defer c.running.Add(-1)
			for m := c.most.Load(); n > m && !c.most.CompareAndSwap(m, n); m = c.most.Load() {
			}
			time.Sleep(time.Millisecond)
			return strconv.ParseInt(string(b), 10, 64)
		})
}

// TestDecodeAheadRunsBesideTheStep: by default a stage decodes records on a
// worker while its step goroutine decodes and delivers others (two decodes
// at once), and DecodeAhead -1 keeps every decode on the step goroutine;
// either way each record reaches the handler decoded as written, in order.
func TestDecodeAheadRunsBesideTheStep(t *testing.T) {
	if runtime.GOMAXPROCS(0) < 2 {
		t.Skip("decoding ahead needs two cores (GOMAXPROCS >= 2)")
	}
	for _, tc := range []struct {
		name  string
		ahead int
		most  int32 // -1: at least 2
	}{
		{"default", 0, -1},
		{"off", -1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, broker.Topic{Name: "in"}, broker.Topic{Name: "out"})
			var slow slowCodec
			in := NewTopic("in", String(), slow.codec())
			out := NewTopic("out", String(), Int64())
			st := On(Named("double"), in, func(m Message[string, int64]) ([]Emission, error) {
				return []Emission{out.Send(m.Key, 2*m.Value)}, nil
			}).Into(out).MustBuild()
			e.changelogs(1, st)
			const n = 60
			var recs []*kgo.Record
			for i := range n {
				recs = append(recs, rec("in", 0, "k", strconv.Itoa(i)))
			}
			e.produce(recs...)
			cfg := e.config("i1")
			cfg.DecodeAhead = tc.ahead
			r := e.start(cfg, st)
			defer r.stop()
			got := e.readExactly("out", n, 30*time.Second)
			for i, r := range got {
				if v, err := Int64().Decode(r.Value); err != nil || v != int64(2*i) {
					t.Fatalf("output %d: %v (%v), want %d", i, v, err, 2*i)
				}
			}
			most := slow.most.Load()
			if tc.most < 0 && most < 2 {
				t.Errorf("at most %d decode at once; decoding ahead should run beside the step goroutine", most)
			}
			if tc.most > 0 && most != tc.most {
				t.Errorf("%d decodes at once with DecodeAhead %d, want %d", most, tc.ahead, tc.most)
			}
		})
	}
}

// TestDecodeAheadFinishSleepsWhileAWorkerDecodes: a codec may block (a
// remote schema lookup). finish waits for the worker inside it parked, not
// spinning, returns only once the worker has left, and leaves no window.
func TestDecodeAheadFinishSleepsWhileAWorkerDecodes(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	top := NewTopic("in", String(), Of(
		func(v int64) ([]byte, error) { return strconv.AppendInt(nil, v, 10), nil },
		func(b []byte) (int64, error) {
			if string(b) == "0" {
				close(entered)
				<-release
			}
			return strconv.ParseInt(string(b), 10, 64)
		}))
	var recs []*kgo.Record
	for i := range 4 {
		recs = append(recs, &kgo.Record{Offset: int64(i), Key: []byte("k"), Value: strconv.AppendInt(nil, int64(i), 10)})
	}
	d := decodeAhead{workers: 1}
	defer d.close()
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	defer unblock() // before close waits for the worker
	dec := aheadOf(top)()
	d.add(dec, recs)
	d.start()
	<-entered
	finished := make(chan struct{})
	go func() {
		d.finish()
		close(finished)
	}()
	// The finishing goroutine parks on the condition; a spin would show
	// it runnable, running or yielding.
	waitFor(t, 10*time.Second, "finish parked on the worker", func() bool {
		buf := make([]byte, 1<<20)
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "(*decodeAhead).finish") {
				return strings.Contains(g, "[sync.Cond.Wait")
			}
		}
		return false
	})
	select {
	case <-finished:
		t.Fatal("finish returned while a worker was inside the window")
	default:
	}
	unblock()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("finish did not return after the worker left")
	}
	if dec.window() != nil || len(d.wins) != 0 {
		t.Fatal("finish left a window behind")
	}
}
