package stage

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/broker"
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
