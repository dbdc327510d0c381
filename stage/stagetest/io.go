package stagetest

import (
	"context"
	"fmt"
	"time"

	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Output is one record read from a topic, decoded with the topic's codecs.
type Output[K, V any] struct {
	Key        K
	Value      V
	KeyIsNil   bool
	ValueIsNil bool
	Partition  int32
	Offset     int64
	Timestamp  time.Time
	// Headers are every header as written, the stamp headers included.
	Headers []stage.Header
}

// Send produces (k, v) to topic with a plain producer, partitioned as
// Kafka's default partitioner does, and waits for the acknowledgement. The
// record carries no stamp: it claims nothing.
func Send[K, V any](d *Driver, topic *stage.Topic[K, V], k K, v V) {
	d.t.Helper()
	if err := send(d, topic, k, v, nil); err != nil {
		d.t.Fatalf("stagetest: send to %s: %v", topic.Name(), err)
	}
}

// SendRecord produces a record you built — with headers (a stamp from the
// clock package), a nil key or value — to exactly the partition it names,
// and waits for the acknowledgement.
func SendRecord(d *Driver, r *kgo.Record) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d.opts.timeout)
	defer cancel()
	if err := d.manual.ProduceSync(ctx, r).FirstErr(); err != nil {
		d.t.Fatalf("stagetest: send to %s: %v", r.Topic, err)
	}
}

func send[K, V any](d *Driver, topic *stage.Topic[K, V], k K, v V, hs []kgo.RecordHeader) error {
	kb, err := topic.KeyCodec().Encode(k)
	if err != nil {
		return fmt.Errorf("encode key: %w", err)
	}
	vb, err := topic.ValueCodec().Encode(v)
	if err != nil {
		return fmt.Errorf("encode value: %w", err)
	}
	if kb == nil {
		kb = []byte{}
	}
	if vb == nil {
		vb = []byte{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), d.opts.timeout)
	defer cancel()
	return d.prod.ProduceSync(ctx, &kgo.Record{Topic: topic.Name(), Key: kb, Value: vb, Headers: hs}).FirstErr()
}

// Read returns the next n records of topic (read_committed, from the
// beginning of the topic across calls), decoded. It fails the test if
// fewer arrive within the driver's timeout, if the application stopped with
// an error, or if a record does not decode.
func Read[K, V any](d *Driver, topic *stage.Topic[K, V], n int) []Output[K, V] {
	d.t.Helper()
	rs, err := d.read(topic.Name(), n, d.opts.timeout)
	if err != nil {
		d.t.Fatalf("stagetest: read %s: %v", topic.Name(), err)
	}
	out, err := decodeAll(topic, rs)
	if err != nil {
		d.t.Fatalf("stagetest: read %s: %v", topic.Name(), err)
	}
	return out
}

// ReadAvailable returns the records of topic that arrive within wait,
// decoded: use it to assert that nothing (more) was emitted.
func ReadAvailable[K, V any](d *Driver, topic *stage.Topic[K, V], wait time.Duration) []Output[K, V] {
	d.t.Helper()
	rs, _ := d.read(topic.Name(), -1, wait)
	out, err := decodeAll(topic, rs)
	if err != nil {
		d.t.Fatalf("stagetest: read %s: %v", topic.Name(), err)
	}
	return out
}

func decodeAll[K, V any](topic *stage.Topic[K, V], rs []*kgo.Record) ([]Output[K, V], error) {
	out := make([]Output[K, V], 0, len(rs))
	for _, r := range rs {
		o := Output[K, V]{KeyIsNil: r.Key == nil, ValueIsNil: r.Value == nil, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp}
		for _, h := range r.Headers {
			o.Headers = append(o.Headers, stage.Header(h))
		}
		var err error
		if r.Key != nil {
			if o.Key, err = topic.KeyCodec().Decode(r.Key); err != nil {
				return out, fmt.Errorf("%s[%d]@%d: decode key: %w", r.Topic, r.Partition, r.Offset, err)
			}
		}
		if r.Value != nil {
			if o.Value, err = topic.ValueCodec().Decode(r.Value); err != nil {
				return out, fmt.Errorf("%s[%d]@%d: decode value: %w", r.Topic, r.Partition, r.Offset, err)
			}
		}
		out = append(out, o)
	}
	return out, nil
}

// read returns the next n raw records of topic, or with n < 0 whatever
// arrives within wait.
func (d *Driver) read(topic string, n int, wait time.Duration) ([]*kgo.Record, error) {
	d.rmu.Lock()
	defer d.rmu.Unlock()
	cl := d.readers[topic]
	if cl == nil {
		var err error
		cl, err = d.cluster.NewClient(
			kgo.ConsumeTopics(topic),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		)
		if err != nil {
			return nil, err
		}
		d.readers[topic] = cl
	}
	deadline := time.Now().Add(wait)
	for (n < 0 || len(d.buffer[topic]) < n) && time.Now().Before(deadline) {
		if n >= 0 && d.Err() != nil {
			return nil, fmt.Errorf("the application stopped: %w", d.Err())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { d.buffer[topic] = append(d.buffer[topic], r) })
	}
	buf := d.buffer[topic]
	if n < 0 {
		n = len(buf)
	}
	if len(buf) < n {
		return nil, fmt.Errorf("%d records within %v, want %d", len(buf), wait, n)
	}
	d.buffer[topic] = buf[n:]
	return buf[:n], nil
}
