package stage

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
)

// fakeExternal is an external sink that keeps what a step handed it and
// moves it to settled only when Settle succeeds. The first `failures`
// calls to Settle that have records fail.
type fakeExternal struct {
	mu       sync.Mutex
	failures int
	begins   int
	step     []string
	settled  []string
}

func (f *fakeExternal) Begin(context.Context) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.begins++
	f.step = nil
}

func (f *fakeExternal) Settle(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.step) > 0 && f.failures > 0 {
		f.failures--
		return errors.New("sink unavailable")
	}
	f.settled = append(f.settled, f.step...)
	f.step = nil
	return nil
}

func (f *fakeExternal) add(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.step = append(f.step, s)
}

func (f *fakeExternal) snapshot() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.settled)
}

// TestExternalSinkGatesTheCommit: a step whose external sink does not
// settle is aborted — its Kafka outputs never become visible — and
// processed again from committed state until the sink settles; the sink
// then holds every record once and Kafka every output once.
func TestExternalSinkGatesTheCommit(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in"}, broker.Topic{Name: "out"})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	x := &fakeExternal{failures: 3}
	st := On(Named("fwd"), in, func(m Message[string, string]) ([]Emission, error) {
		x.add(m.Value)
		return []Emission{out.Send(m.Key, m.Value)}, nil
	}).Into(out).IntoExternal(x).MustBuild()
	e.changelogs(1, st)
	var want []string
	for i := range 20 {
		v := fmt.Sprintf("v%d", i)
		want = append(want, v)
		e.produce(rec("in", 0, "k", v))
	}
	r := e.start(e.config("i1"), st)
	got := values(e.readExactly("out", 20, 30*time.Second))
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("out = %q, want %q", got, want)
	}
	if s := x.snapshot(); !slices.Equal(s, want) {
		t.Fatalf("external sink settled %q, want %q", s, want)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.failures != 0 || x.begins < 4 {
		t.Fatalf("failures left %d, begins %d: the failing steps were not retried", x.failures, x.begins)
	}
}

func TestExternalSinkAloneIsAnEffect(t *testing.T) {
	in := NewTopic("in", String(), String())
	h := func(Message[string, string]) ([]Emission, error) { return nil, nil }
	if _, err := On(Named("s"), in, h).IntoExternal(&fakeExternal{}).Build(); err != nil {
		t.Fatalf("a stage with only an external sink: %v", err)
	}
	if _, err := On(Named("s"), in, h).Build(); !errors.Is(err, ErrInvalidStage) {
		t.Fatalf("a stage without sinks: %v, want ErrInvalidStage", err)
	}
	if _, err := On(Named("s"), in, h).IntoExternal(nil).Build(); !errors.Is(err, ErrInvalidStage) {
		t.Fatalf("a nil external sink: %v, want ErrInvalidStage", err)
	}
	if _, err := On(Named("s"), in, h).IntoExternal((*fakeExternal)(nil)).Build(); !errors.Is(err, ErrInvalidStage) {
		t.Fatalf("a typed nil external sink: %v, want ErrInvalidStage", err)
	}
	x := &fakeExternal{}
	st, err := On(Named("s"), in, h).IntoExternal(x, &fakeExternal{}).IntoExternal(x).Build()
	if err != nil || len(st.externals) != 2 {
		t.Fatalf("declaring a sink twice: %v, %d sinks, want 2", err, len(st.externals))
	}
}
