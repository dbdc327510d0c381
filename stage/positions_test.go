package stage

import (
	"fmt"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
)

// counter builds a stage named name counting per key over in into sink.
func counter(name string, in, sink *Topic[string, string]) *Stage {
	b := WithState(Named(name), Int64(), 0)
	OnFold(b, in, func(n int64, m Message[string, string]) (Step[int64], error) {
		n++
		return Next(n, sink.Send(m.Key, fmt.Sprintf("%s#%d:%s", m.Key, n, m.Value))), nil
	})
	return b.Into(sink).MustBuild()
}

// TestStageAddedOverConsumedTopic: a deploy adds stage s2 over topic in,
// which stage s1 already consumed and committed (#21 defect 2). s2 starts
// from its own position — none, so the log start — not from s1's committed
// offset: it counts all ten records; s1 counts each of its records once.
// Before the fix s2 saw 5 of 10.
func TestStageAddedOverConsumedTopic(t *testing.T) {
	const parts = 2
	e := newEnv(t, broker.Topic{Name: "in", Partitions: parts}, broker.Topic{Name: "out1", Partitions: parts}, broker.Topic{Name: "out2", Partitions: parts})
	in := NewTopic("in", String(), String())
	s1 := counter("s1", in, NewTopic("out1", String(), String()))
	s2 := counter("s2", in, NewTopic("out2", String(), String()))
	e.changelogs(parts, s1, s2)

	want := e.inputs("in", 10, 4, parts, 0)
	r := e.start(e.config("i1"), s1)
	e.readExactly("out1", 10, 30*time.Second)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}

	more := e.inputs("in", 10, 4, parts, 10)
	for k, vs := range more {
		want[k] = append(want[k], vs...)
	}
	r = e.start(e.config("i1"), s1, s2)
	out2 := e.readExactly("out2", 20, 30*time.Second)
	out1 := e.readExactly("out1", 20, 30*time.Second)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	checkCounts(t, out1, want)
	checkCounts(t, out2, want)
}

// TestStageAddedDuringRollingUpgrade: v1 runs s1 over in; v2 adds s2 over
// in. While i1 (v1) and i2 (v2) run side by side, i1's partitions advance
// the group's offsets without s2; when i1 restarts as v2, s2 at those
// partitions starts from its own position, and at every partition s2
// counts every record exactly once.
func TestStageAddedDuringRollingUpgrade(t *testing.T) {
	const parts = 4
	e := newEnv(t, broker.Topic{Name: "in", Partitions: parts}, broker.Topic{Name: "out1", Partitions: parts}, broker.Topic{Name: "out2", Partitions: parts})
	in := NewTopic("in", String(), String())
	s1 := counter("s1", in, NewTopic("out1", String(), String()))
	s2 := counter("s2", in, NewTopic("out2", String(), String()))
	e.changelogs(parts, s1, s2)

	want := e.inputs("in", 16, 8, parts, 0)
	add := func(from int) {
		for k, vs := range e.inputs("in", 16, 8, parts, from) {
			want[k] = append(want[k], vs...)
		}
	}
	i1 := e.start(e.config("i1"), s1)
	e.readExactly("out1", 16, 30*time.Second)
	i2 := e.start(e.config("i2"), s1, s2)
	waitFor(t, 30*time.Second, "i2 to run tasks", func() bool { return len(i2.app.Tasks()) > 0 })
	add(16)
	e.readExactly("out1", 32, 30*time.Second)
	if err := i1.stop(); err != nil {
		t.Fatal(err)
	}
	i1 = e.start(e.config("i1"), s1, s2)
	add(32)
	out1 := e.readExactly("out1", 48, 30*time.Second)
	out2 := e.readExactly("out2", 48, 30*time.Second)
	for _, r := range []*running{i1, i2} {
		if err := r.stop(); err != nil {
			t.Fatal(err)
		}
	}
	checkCounts(t, out1, want)
	checkCounts(t, out2, want)
}
