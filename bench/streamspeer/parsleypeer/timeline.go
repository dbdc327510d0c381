package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A timeline records, as CSV rows, what the peer's clients and its handler
// did and when: every request to a broker (its write start and round
// trip), every input record the client buffered from a fetch, every
// delivery to the handler and every produced record's acknowledgement.
// With the driver's per-record latency dump it shows what a step did
// around a slow record.
//
// Columns: t_unix_ns, event, detail, id, dur_us. event is one of
//
//	request   detail = request name@broker; t = write start; dur = round trip (write to read), id = -1
//	queued    the same request: t = created; dur = wait before its write (WriteWait)
//	fetched   detail = topic/partition@offset; id = payment id
//	deliver   detail = topic/partition@offset; id = payment id
//	acked     detail = topic/partition@offset (sink and changelog); id = payment id or -1
type timeline struct {
	mu  sync.Mutex
	w   *bufio.Writer
	err error
	buf []byte
}

func newTimeline(w io.Writer) *timeline {
	t := &timeline{w: bufio.NewWriterSize(w, 1<<20)}
	t.line(time.Time{}, "", "", 0, 0, true)
	return t
}

var (
	_ kgo.HookBrokerE2E               = (*timeline)(nil)
	_ kgo.HookFetchRecordBuffered     = (*timeline)(nil)
	_ kgo.HookProduceRecordUnbuffered = (*timeline)(nil)
)

func (t *timeline) line(at time.Time, event, detail string, id int64, dur time.Duration, header bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err != nil {
		return
	}
	if header {
		_, t.err = t.w.WriteString("t_unix_ns,event,detail,id,dur_us\n")
		return
	}
	b := t.buf[:0]
	b = strconv.AppendInt(b, at.UnixNano(), 10)
	b = append(b, ',')
	b = append(b, event...)
	b = append(b, ',')
	b = append(b, detail...)
	b = append(b, ',')
	b = strconv.AppendInt(b, id, 10)
	b = append(b, ',')
	b = strconv.AppendInt(b, dur.Microseconds(), 10)
	b = append(b, '\n')
	t.buf = b
	_, t.err = t.w.Write(b)
}

func (t *timeline) OnBrokerE2E(m kgo.BrokerMetadata, key int16, e kgo.BrokerE2E) {
	now := time.Now()
	e2e := e.DurationE2E()
	name := kmsg.NameForKey(key) + "@" + strconv.Itoa(int(m.NodeID))
	t.line(now.Add(-e2e-e.WriteWait), "queued", name, -1, e.WriteWait, false)
	t.line(now.Add(-e2e), "request", name, -1, e2e, false)
}

func (t *timeline) OnFetchRecordBuffered(r *kgo.Record) {
	if r.Attrs.IsControl() {
		return
	}
	t.line(time.Now(), "fetched", coord(r.Topic, r.Partition, r.Offset), paymentID(r.Value), 0, false)
}

func (t *timeline) OnProduceRecordUnbuffered(r *kgo.Record, err error) {
	if err != nil {
		t.line(time.Now(), "failed", coord(r.Topic, r.Partition, -1), paymentID(r.Value), 0, false)
		return
	}
	t.line(time.Now(), "acked", coord(r.Topic, r.Partition, r.Offset), paymentID(r.Value), 0, false)
}

// deliver records the handler's delivery of a payment.
func (t *timeline) deliver(topic string, partition int32, offset, id int64) {
	t.line(time.Now(), "deliver", coord(topic, partition, offset), id, 0, false)
}

// close flushes the timeline and reports its first write error.
func (t *timeline) close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.err == nil {
		t.err = t.w.Flush()
	}
	if t.err != nil {
		return fmt.Errorf("parsleypeer: timeline: %w", t.err)
	}
	return nil
}

func coord(topic string, partition int32, offset int64) string {
	return topic + "/" + strconv.Itoa(int(partition)) + "@" + strconv.FormatInt(offset, 10)
}

// paymentID is the id of a payment record's JSON value, or -1 for other
// records (changelog records, undecodable values).
func paymentID(v []byte) int64 {
	var p struct {
		ID *int64 `json:"id"`
	}
	if json.Unmarshal(v, &p) != nil || p.ID == nil {
		return -1
	}
	return *p.ID
}
