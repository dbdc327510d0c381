package stage

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestLinearPipelineExactlyOnce(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	in := NewTopic("in", String(), String())
	out := NewTopic("out", String(), String())
	st := On(Named("upper"), in, func(m Message[string, string]) ([]Emission, error) {
		return []Emission{out.Send(m.Key, strings.ToUpper(m.Value))}, nil
	}).Into(out).MustBuild()
	e.changelogs(2, st)
	r := e.start(e.config("i1"), st)

	var recs []*kgo.Record
	for i := range 20 {
		recs = append(recs, rec("in", int32(i%2), fmt.Sprintf("k%d", i), fmt.Sprintf("v%d", i)))
	}
	e.produce(recs...)
	if err, done := r.exited(3 * time.Second); done {
		t.Fatalf("Run returned: %v", err)
	}
	got := e.readExactly("out", 20, 20*time.Second)
	vals := values(got)
	slices.Sort(vals)
	var want []string
	for i := range 20 {
		want = append(want, fmt.Sprintf("V%d", i))
	}
	slices.Sort(want)
	if !slices.Equal(vals, want) {
		t.Fatalf("out = %q, want %q", vals, want)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestNilsAndTimestamps: nil keys and values reach user logic as nil (codecs
// never see them) and go out as nil; fold state for a nil key is separate
// from an empty key's; emissions carry the message's timestamp unless
// overridden; nil-keyed emissions go to the task's partition.
func TestNilsAndTimestamps(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	strict := Of(func(s string) ([]byte, error) {
		if s == "" {
			return nil, fmt.Errorf("strict codec: empty")
		}
		return []byte(s), nil
	}, func(b []byte) (string, error) {
		if b == nil {
			return "", fmt.Errorf("strict codec: saw nil")
		}
		return string(b), nil
	})
	in := NewTopic("in", String(), strict)
	out := NewTopic("out", String(), strict)
	override := time.UnixMilli(1_600_000_000_000)
	b := WithState(Named("nils"), Int64(), 0)
	OnFold(b, in, func(n int64, m Message[string, string]) (Step[int64], error) {
		n++
		var e Emission
		switch {
		case m.ValueIsNil:
			e = out.Tombstone(m.Key)
		case m.KeyIsNil:
			e = out.SendUnkeyed(fmt.Sprintf("nil-key #%d", n))
		default:
			e = out.Send(m.Key, fmt.Sprintf("%q #%d", m.Key, n))
		}
		if m.Value == "late" {
			e = e.At(override)
		}
		return Next(n, e), nil
	})
	st := b.Into(out).MustBuild()
	e.changelogs(2, st)
	ts := time.UnixMilli(1_700_000_000_000)
	recs := []*kgo.Record{
		{Topic: "in", Partition: 1, Key: nil, Value: []byte("x"), Timestamp: ts},
		{Topic: "in", Partition: 1, Key: []byte{}, Value: []byte("y"), Timestamp: ts},
		{Topic: "in", Partition: 1, Key: nil, Value: []byte("z"), Timestamp: ts},
		{Topic: "in", Partition: 1, Key: []byte("k"), Value: nil, Timestamp: ts},
		{Topic: "in", Partition: 1, Key: []byte("k"), Value: []byte("late"), Timestamp: ts},
	}
	e.produce(recs...)
	r := e.start(e.config("i1"), st)
	outs := e.readExactly("out", 5, 20*time.Second)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	byVal := map[string]*kgo.Record{}
	var tomb *kgo.Record
	for _, o := range outs {
		if o.Value == nil {
			tomb = o
			continue
		}
		byVal[string(o.Value)] = o
	}
	for _, want := range []string{"nil-key #1", "nil-key #2", `"" #1`, `"k" #2`} {
		if byVal[want] == nil {
			t.Fatalf("missing output %q; got %v", want, values(outs))
		}
	}
	if o := byVal["nil-key #1"]; o.Key != nil || o.Partition != 1 {
		t.Fatalf("nil-keyed emission went out with key %q to partition %d, want nil key on the task's partition 1", o.Key, o.Partition)
	}
	if o := byVal[`"" #1`]; o.Key == nil || len(o.Key) != 0 {
		t.Fatalf("empty key went out as %v", o.Key)
	}
	if tomb == nil || string(tomb.Key) != "k" {
		t.Fatalf("no tombstone for k in %v", values(outs))
	}
	if !byVal["nil-key #1"].Timestamp.Equal(ts) {
		t.Fatalf("emission timestamp %v, want the message's %v", byVal["nil-key #1"].Timestamp, ts)
	}
	if !byVal[`"k" #2`].Timestamp.Equal(override) {
		t.Fatalf("overridden timestamp %v, want %v", byVal[`"k" #2`].Timestamp, override)
	}
}

// TestStagesShareAnApplication: three stages in one application — a chain
// (in → mid → out) and a second consumer of the chain's source — each
// process every record exactly once, and the chain's end sees causes first.
func TestStagesShareAnApplication(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "mid", Partitions: 2},
		broker.Topic{Name: "out", Partitions: 2}, broker.Topic{Name: "audit", Partitions: 2})
	in, mid := NewTopic("in", String(), String()), NewTopic("mid", String(), String())
	out, audit := NewTopic("out", String(), String()), NewTopic("audit", String(), String())
	a := On(Named("a"), in, func(m Message[string, string]) ([]Emission, error) {
		return []Emission{mid.Send(m.Key, "a("+m.Value+")")}, nil
	}).Into(mid).MustBuild()
	b := On(Named("b"), mid, func(m Message[string, string]) ([]Emission, error) {
		return []Emission{out.Send(m.Key, "b("+m.Value+")")}, nil
	}).Into(out).MustBuild()
	seen := &collector{}
	c := On(On(Named("c"), in, func(m Message[string, string]) ([]Emission, error) {
		seen.add("in " + m.Value)
		return []Emission{audit.Send(m.Key, m.Value)}, nil
	}), mid, func(m Message[string, string]) ([]Emission, error) {
		seen.add("mid " + m.Value)
		return nil, nil
	}).Into(audit).MustBuild()
	e.changelogs(2, a, b, c)
	r := e.start(e.config("i1"), a, b, c)
	var recs []*kgo.Record
	for i := range 30 {
		recs = append(recs, rec("in", int32(i%2), fmt.Sprintf("k%d", i%2), fmt.Sprintf("v%d", i)))
	}
	e.produce(recs...)
	outs := e.readExactly("out", 30, 30*time.Second)
	e.readExactly("audit", 30, 30*time.Second)
	waitFor(t, 10*time.Second, "stage c to see every mid record", func() bool { return seen.len() == 60 })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	got := values(outs)
	slices.Sort(got)
	var want []string
	for i := range 30 {
		want = append(want, fmt.Sprintf("b(a(v%d))", i))
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("out = %q, want %q", got, want)
	}
	pos := map[string]int{}
	for i, s := range seen.snapshot() {
		pos[s] = i
	}
	for i := range 30 {
		v := fmt.Sprintf("v%d", i)
		if pos["mid a("+v+")"] < pos["in "+v] {
			t.Fatalf("stage c got a(%s) before %s", v, v)
		}
	}
}
