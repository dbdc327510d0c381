package clock_test

import (
	"context"
	"testing"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// clusterOffsets answers a node's broker questions from the cluster.
type clusterOffsets struct {
	admin *kadm.Client
	names map[headers.TopicID]string
}

func (o clusterOffsets) list(ctx context.Context, id headers.TopicID, end bool) ([]int64, bool, error) {
	name, ok := o.names[id]
	if !ok {
		return nil, false, nil
	}
	list := o.admin.ListStartOffsets
	if end {
		list = o.admin.ListEndOffsets
	}
	lo, err := list(ctx, name)
	if err != nil {
		return nil, false, err
	}
	var out []int64
	for p := int32(0); ; p++ {
		l, ok := lo.Lookup(name, p)
		if !ok {
			break
		}
		if l.Err != nil {
			return nil, false, l.Err
		}
		out = append(out, l.Offset)
	}
	return out, len(out) > 0, nil
}

func (o clusterOffsets) EndOffsets(ctx context.Context, id headers.TopicID) ([]int64, bool, error) {
	return o.list(ctx, id, true)
}

func (o clusterOffsets) LogStarts(ctx context.Context, id headers.TopicID) ([]int64, bool, error) {
	return o.list(ctx, id, false)
}

func toProtocol(r *kgo.Record, id headers.TopicID) *protocol.Record {
	hs := make([]headers.Header, len(r.Headers))
	for i, h := range r.Headers {
		hs[i] = headers.Header(h)
	}
	return &protocol.Record{
		Coordinate: headers.Coordinate{Channel: ch(id, r.Partition), Offset: r.Offset},
		Timestamp:  r.Timestamp.UnixMilli(),
		Key:        r.Key, Value: r.Value, Headers: hs,
	}
}

// A protocol node consuming X and Y, fed real fetched records, holds B
// (stamped by a plain producer after it wrote A) until A is delivered, even
// when B is fed first. Without the stamp the same B is delivered at once.
func TestGateHoldsStampedEffectUntilItsCause(t *testing.T) {
	c := cluster(t, broker.Topic{Name: "x"}, broker.Topic{Name: "y"})
	x, y := topicID(t, c, "x"), topicID(t, c, "y")
	for range 2 { // fillers at x@0 and x@1, so A is at x@2
		produce(t, c, &kgo.Record{Topic: "x", Value: []byte("filler")})
	}
	clk := clock.New(c.Admin())
	a := &kgo.Record{Topic: "x", Value: []byte("A")}
	if err := clk.Stamp(testCtx(t), a); err != nil {
		t.Fatal(err)
	}
	if err := clk.RecordProduced(produce(t, c, a)); err != nil {
		t.Fatal(err)
	}
	b := &kgo.Record{Topic: "y", Value: []byte("B")}
	if err := clk.Stamp(testCtx(t), b); err != nil {
		t.Fatal(err)
	}
	produce(t, c, b)
	produce(t, c, &kgo.Record{Topic: "y", Value: []byte("unstamped")}) // y@1

	xs, ys := consume(t, c, "x", 0, 3), consume(t, c, "y", 0, 2)
	node, err := protocol.New(testCtx(t), protocol.Config{
		ApplicationID: "gate", Stage: "check",
		Inputs:  []headers.Channel{ch(x, 0), ch(y, 0)},
		Store:   protocol.NewMemStore(),
		Offsets: clusterOffsets{c.Admin(), map[headers.TopicID]string{x: "x", y: "y"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if ds, err := node.Release(); err != nil || len(ds) != 0 {
		t.Fatalf("Release: %d deliveries, %v", len(ds), err)
	}

	ds, err := node.OnRecord(toProtocol(ys[0], y))
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 0 {
		t.Fatalf("B delivered before A: %q", ds[0].Value)
	}
	if holds, err := node.ExplainHolds(); err != nil || len(holds) != 1 {
		t.Fatalf("holds %v (%v), want B held", holds, err)
	}
	var order []string
	for _, r := range xs {
		ds, err := node.OnRecord(toProtocol(r, x))
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			order = append(order, string(d.Value))
		}
	}
	want := []string{"filler", "filler", "A", "B"}
	if len(order) != len(want) {
		t.Fatalf("delivered %q, want %q", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("delivered %q, want %q", order, want)
		}
	}

	// The control: a fresh node fed the unstamped y@1 before anything on x
	// delivers it at once, so the hold above was B's stamp at work.
	fresh, err := protocol.New(testCtx(t), protocol.Config{
		ApplicationID: "gate", Stage: "control",
		Inputs:  []headers.Channel{ch(x, 0), ch(y, 0)},
		Store:   protocol.NewMemStore(),
		Offsets: clusterOffsets{c.Admin(), map[headers.TopicID]string{x: "x", y: "y"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := fresh.PositionAdvance(ch(y, 0), 1); err != nil { // y@0 is the control's to skip
		t.Fatal(err)
	}
	ds, err = fresh.OnRecord(toProtocol(ys[1], y))
	if err != nil || len(ds) != 1 || string(ds[0].Value) != "unstamped" {
		t.Fatalf("unstamped record: %d deliveries, %v", len(ds), err)
	}
	if err := node.Flush(); err != nil {
		t.Fatal(err)
	}
}
