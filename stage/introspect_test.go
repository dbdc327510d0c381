package stage

import (
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
)

// TestReadersDoNotWaitForAStep: while a handler runs (here, blocked), Tasks
// and ExplainHolds answer from the published snapshot instead of waiting
// for the step to end.
func TestReadersDoNotWaitForAStep(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 1}, broker.Topic{Name: "out", Partitions: 1})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	entered, release := make(chan struct{}), make(chan struct{})
	st := On(Named("slow"), in, func(m Message[string, string]) ([]Emission, error) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
		return []Emission{out.Send(m.Key, m.Value)}, nil
	}).Into(out).MustBuild()
	e.changelogs(1, st)
	r := e.start(e.config("i1"), st)
	defer close(release)
	e.produce(rec("in", 0, "k", "v"))
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the handler never ran")
	}
	answered := make(chan []TaskInfo, 1)
	go func() {
		r.app.ExplainHolds()
		answered <- r.app.Tasks()
	}()
	select {
	case tasks := <-answered:
		if len(tasks) != 1 || tasks[0].Stage != "slow" || tasks[0].Partition != 0 {
			t.Fatalf("Tasks() = %+v during the step, want the one task slow/0", tasks)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Tasks and ExplainHolds waited for the running step")
	}
}
