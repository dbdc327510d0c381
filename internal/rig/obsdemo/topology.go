// Package obsdemo builds small stamped topologies on a cluster for the
// observer's tests, its browser test and `parsley-observe demo`: a clean
// pipeline of plain producers stamping with clock.Clock, and a faulty one
// that produces every finding the observer knows, each at a coordinate
// the caller is told.
package obsdemo

import (
	"context"
	"fmt"
	"time"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Cluster is what the topologies need of a cluster: seed brokers, an
// admin client and a way to create topics.
type Cluster interface {
	Addrs() []string
	Admin() *kadm.Client
	NewClient(opts ...kgo.Opt) (*kgo.Client, error)
}

// Builder produces records for a topology. Close it when done.
type Builder struct {
	c    Cluster
	prod *kgo.Client
	ids  map[string]headers.TopicID
}

// NewBuilder returns a builder producing to c.
func NewBuilder(c Cluster) (*Builder, error) {
	prod, err := c.NewClient(kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return nil, err
	}
	return &Builder{c: c, prod: prod, ids: map[string]headers.TopicID{}}, nil
}

// Close closes the builder's producer.
func (b *Builder) Close() { b.prod.Close() }

// Create creates topics with the given partition counts.
func (b *Builder) Create(ctx context.Context, parts int32, names ...string) error {
	for _, n := range names {
		resp, err := b.c.Admin().CreateTopic(ctx, parts, 1, nil, n)
		if err == nil {
			err = resp.Err
		}
		if err != nil {
			return fmt.Errorf("obsdemo: create topic %q: %w", n, err)
		}
		b.ids[n] = headers.TopicID(resp.ID)
	}
	return nil
}

// ID returns the topic ID of a topic the builder created.
func (b *Builder) ID(name string) headers.TopicID { return b.ids[name] }

// Ch returns the channel of a created topic's partition.
func (b *Builder) Ch(name string, p int32) headers.Channel {
	return headers.Channel{Topic: b.ids[name], Partition: p}
}

// At returns the coordinate of a created topic's partition and offset.
func (b *Builder) At(name string, p int32, off int64) headers.Coordinate {
	return headers.Coordinate{Channel: b.Ch(name, p), Offset: off}
}

// Produce writes one record with the given headers (nil for an unstamped
// record) and returns its coordinate.
func (b *Builder) Produce(ctx context.Context, topic string, p int32, hs []kgo.RecordHeader) (headers.Coordinate, error) {
	rec := &kgo.Record{Topic: topic, Partition: p, Value: []byte("v"), Headers: hs}
	if err := b.prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return headers.Coordinate{}, fmt.Errorf("obsdemo: produce to %q/%d: %w", topic, p, err)
	}
	return b.At(topic, p, rec.Offset), nil
}

// Stamped writes a record carrying stamp st in the vc dialect.
func (b *Builder) Stamped(ctx context.Context, topic string, p int32, st *headers.Stamp) (headers.Coordinate, error) {
	hs, err := headers.AppendStamp([]kgo.RecordHeader(nil), st, headers.DialectVC)
	if err != nil {
		return headers.Coordinate{}, err
	}
	return b.Produce(ctx, topic, p, hs)
}

// Txn writes one stamped (empty-clock) record to topic partition 0 in a
// transaction and commits or aborts it. It returns the record's offset;
// the marker follows it.
func (b *Builder) Txn(ctx context.Context, topic string, commit bool) (int64, error) {
	cl, err := b.c.NewClient(kgo.TransactionalID(fmt.Sprintf("obsdemo-%s-%d", topic, time.Now().UnixNano())),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		return 0, fmt.Errorf("obsdemo: begin transaction: %w", err)
	}
	hs, _ := headers.AppendStamp([]kgo.RecordHeader(nil), &headers.Stamp{}, headers.DialectVC)
	rec := &kgo.Record{Topic: topic, Value: []byte("t"), Headers: hs}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return 0, fmt.Errorf("obsdemo: transactional produce to %q: %w", topic, err)
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		return 0, fmt.Errorf("obsdemo: end transaction: %w", err)
	}
	return rec.Offset, nil
}

// Pipeline is a clean stamped pipeline: a stamped plain producer writes
// orders over two partitions, and a second stamped plain producer observes
// each order and writes a shipment for it. Every record is stamped and
// every claim names a committed record.
type Pipeline struct {
	b           *Builder
	front, ship *clock.Clock
	n           int
}

// NewPipeline creates topics "orders" (2 partitions) and "shipments" (1).
func (b *Builder) NewPipeline(ctx context.Context) (*Pipeline, error) {
	if err := b.Create(ctx, 2, "orders"); err != nil {
		return nil, err
	}
	if err := b.Create(ctx, 1, "shipments"); err != nil {
		return nil, err
	}
	return &Pipeline{b: b, front: clock.New(b.c.Admin()), ship: clock.New(b.c.Admin())}, nil
}

// Step writes one order and its shipment and returns the shipment's
// coordinate.
func (p *Pipeline) Step(ctx context.Context) (headers.Coordinate, error) {
	i := p.n
	o := &kgo.Record{Topic: "orders", Partition: int32(i % 2), Value: []byte(fmt.Sprint("order-", i))}
	if err := p.front.Stamp(ctx, o); err != nil {
		return headers.Coordinate{}, err
	}
	if err := p.b.prod.ProduceSync(ctx, o).FirstErr(); err != nil {
		return headers.Coordinate{}, fmt.Errorf("obsdemo: produce order: %w", err)
	}
	if err := p.front.RecordProduced(o); err != nil {
		return headers.Coordinate{}, err
	}
	if err := p.ship.Observe(o); err != nil {
		return headers.Coordinate{}, err
	}
	s := &kgo.Record{Topic: "shipments", Value: []byte(fmt.Sprint("shipment-", i))}
	if err := p.ship.Stamp(ctx, s); err != nil {
		return headers.Coordinate{}, err
	}
	if err := p.b.prod.ProduceSync(ctx, s).FirstErr(); err != nil {
		return headers.Coordinate{}, fmt.Errorf("obsdemo: produce shipment: %w", err)
	}
	if err := p.ship.RecordProduced(s); err != nil {
		return headers.Coordinate{}, err
	}
	p.n++
	return p.b.At("shipments", 0, s.Offset), nil
}

// Clean runs n steps of a new Pipeline and returns the shipments'
// coordinates.
func (b *Builder) Clean(ctx context.Context, n int) ([]headers.Coordinate, error) {
	p, err := b.NewPipeline(ctx)
	if err != nil {
		return nil, err
	}
	var out []headers.Coordinate
	for range n {
		c, err := p.Step(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// Want is a finding a faulty topology must produce: its code and
// coordinates (as the observer renders them).
type Want struct {
	Code        string
	Coordinates []string
}

// The faulty topology's senders are stage tasks of application "shop",
// with sender IDs derived as a stage derives them, and changelog topics
// ("shop-<stage>-changelog") from which the observer names them.
const App = "shop"

// Stage names of the faulty topology's senders.
const (
	GapStage     = "gap-writer"
	RegressStage = "regress-writer"
	RetiredStage = "retired"
)

// Sender IDs used by the faulty topology: partition 0 of each stage.
var (
	GapSender     = protocol.SenderIDFor(App, GapStage, 0)
	RegressSender = protocol.SenderIDFor(App, RegressStage, 0)
	RetiredSender = protocol.SenderIDFor(App, RetiredStage, 0)
)

func str(cs ...headers.Coordinate) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.String()
	}
	return out
}

// Faulty builds a topology with one instance of every finding and returns
// the findings it must produce. Every record is stamped except the one
// that makes "mixed" partially stamped.
func (b *Builder) Faulty(ctx context.Context) ([]Want, error) {
	if err := b.Create(ctx, 1, "base", "gap", "regress", "txn", "claims", "mixed", "bad", "up", "down", "grow"); err != nil {
		return nil, err
	}
	if err := b.Create(ctx, 16, "wide"); err != nil {
		return nil, err
	}
	for _, stage := range []string{GapStage, RegressStage, RetiredStage} {
		if err := b.Create(ctx, 1, App+"-"+stage+"-changelog"); err != nil {
			return nil, err
		}
	}
	var want []Want
	empty := &headers.Stamp{}
	for range 10 {
		if _, err := b.Stamped(ctx, "base", 0, empty); err != nil {
			return nil, err
		}
	}
	// sequence-gap: seq 1, 2, then 4.
	var gap []headers.Coordinate
	for _, seq := range []int64{1, 2, 4} {
		c, err := b.Stamped(ctx, "gap", 0, &headers.Stamp{Tagged: true, Sender: GapSender, Seq: seq})
		if err != nil {
			return nil, err
		}
		gap = append(gap, c)
	}
	want = append(want, Want{"sequence-gap", str(gap[2], gap[1])})
	// stamp-regression: the later stamp claims base/0@3 after base/0@5.
	var reg []headers.Coordinate
	for i, off := range []int64{5, 3} {
		st := &headers.Stamp{Tagged: true, Sender: RegressSender, Seq: int64(i + 1)}
		st.Clock.SetOffset(b.Ch("base", 0), off)
		c, err := b.Stamped(ctx, "regress", 0, st)
		if err != nil {
			return nil, err
		}
		reg = append(reg, c)
	}
	want = append(want, Want{"stamp-regression", str(reg[1], reg[0])})
	// unsettleable-claim: a commit marker, an aborted record, and an offset
	// past the log end.
	committed, err := b.Txn(ctx, "txn", true)
	if err != nil {
		return nil, err
	}
	aborted, err := b.Txn(ctx, "txn", false)
	if err != nil {
		return nil, err
	}
	for _, claimed := range []headers.Coordinate{b.At("txn", 0, committed+1), b.At("txn", 0, aborted), b.At("base", 0, 100)} {
		st := &headers.Stamp{}
		st.Clock.SetOffset(claimed.Channel, claimed.Offset)
		c, err := b.Stamped(ctx, "claims", 0, st)
		if err != nil {
			return nil, err
		}
		want = append(want, Want{"unsettleable-claim", str(c, claimed)})
	}
	// partially-stamped-topic: one stamped record, then one unstamped.
	stamped, err := b.Stamped(ctx, "mixed", 0, empty)
	if err != nil {
		return nil, err
	}
	unstamped, err := b.Produce(ctx, "mixed", 0, nil)
	if err != nil {
		return nil, err
	}
	want = append(want, Want{"partially-stamped-topic", str(unstamped, stamped)})
	// undecodable-stamp: a vc header with an unknown version byte.
	bad, err := b.Produce(ctx, "bad", 0, []kgo.RecordHeader{{Key: headers.HeaderVC, Value: []byte{9}}})
	if err != nil {
		return nil, err
	}
	want = append(want, Want{"undecodable-stamp", str(bad)})
	// cross-partition-cause: a record whose key murmur2 places on partition
	// 0, written to partition 1 of "placed", claiming "cause"/0, which a
	// stage task for partition 1 does not consume.
	if err := b.Create(ctx, 2, "cause", "placed"); err != nil {
		return nil, err
	}
	cause, err := b.Stamped(ctx, "cause", 0, empty)
	if err != nil {
		return nil, err
	}
	st := &headers.Stamp{}
	st.Clock.SetOffset(cause.Channel, cause.Offset)
	hs, err := headers.AppendStamp([]kgo.RecordHeader(nil), st, headers.DialectVC)
	if err != nil {
		return nil, err
	}
	rec := &kgo.Record{Topic: "placed", Partition: 1, Key: keyOn(0, 2), Value: []byte("v"), Headers: hs}
	if err := b.prod.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return nil, fmt.Errorf("obsdemo: produce to %q/%d: %w", rec.Topic, rec.Partition, err)
	}
	want = append(want, Want{"cross-partition-cause", str(b.At("placed", 1, rec.Offset), cause)})
	// late-joiner-window: a retired sender's record on "up", and a record
	// on "down" still carrying a sequence claim on it.
	upRec, err := b.Stamped(ctx, "up", 0, &headers.Stamp{Tagged: true, Sender: RetiredSender, Seq: 1})
	if err != nil {
		return nil, err
	}
	carrier := &headers.Stamp{}
	carrier.Clock.SetSeq(b.Ch("up", 0), RetiredSender, 1)
	down, err := b.Stamped(ctx, "down", 0, carrier)
	if err != nil {
		return nil, err
	}
	want = append(want, Want{"late-joiner-window", str(down, upRec)})
	// stamp-growth: 48 records claiming ever more partitions of "wide".
	for p := range int32(16) {
		if _, err := b.Stamped(ctx, "wide", p, empty); err != nil {
			return nil, err
		}
	}
	var first, last headers.Coordinate
	for i := range 48 {
		st := &headers.Stamp{}
		for p := range int32(i/3 + 1) {
			st.Clock.SetOffset(b.Ch("wide", p), 0)
		}
		c, err := b.Stamped(ctx, "grow", 0, st)
		if err != nil {
			return nil, err
		}
		if i == 0 {
			first = c
		}
		last = c
	}
	want = append(want, Want{"stamp-growth", str(last, first)})
	return want, nil
}

// keyOn returns the first key "k0", "k1", ... that murmur2 (Kafka's
// default partitioner) places on partition p of n.
func keyOn(p, n int32) []byte {
	murmur2 := kgo.StickyKeyPartitioner(nil).ForTopic("")
	for i := 0; ; i++ {
		k := fmt.Appendf(nil, "k%d", i)
		if int32(murmur2.Partition(&kgo.Record{Key: k}, int(n))) == p {
			return k
		}
	}
}
