package stage

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFailedStepsStopRun: each way a step can fail aborts it (nothing on
// the sink), stops Run under the default policy with a *StepError naming
// the stage and the record's topic, partition and offset, and wraps the
// cause for errors.Is.
func TestFailedStepsStopRun(t *testing.T) {
	other := NewTopic("other", String(), String())
	tests := []struct {
		name    string
		handle  func(out *Topic[string, string], m Message[string, string]) ([]Emission, error)
		corrupt bool // the second record carries an undecodable stamp
		want    error
	}{
		{
			name: "corrupt stamp",
			handle: func(out *Topic[string, string], m Message[string, string]) ([]Emission, error) {
				return []Emission{out.Send(m.Key, m.Value)}, nil
			},
			corrupt: true,
			want:    ErrUndecodable,
		},
		{
			name: "reserved header on an emission",
			handle: func(out *Topic[string, string], m Message[string, string]) ([]Emission, error) {
				return []Emission{out.Send(m.Key, m.Value).WithHeaders(Header{Key: "vc", Value: []byte{1}})}, nil
			},
			want: ErrReservedHeader,
		},
		{
			name: "undeclared sink",
			handle: func(out *Topic[string, string], m Message[string, string]) ([]Emission, error) {
				return []Emission{out.Send(m.Key, m.Value), other.Send(m.Key, m.Value)}, nil
			},
			want: ErrUndeclaredSink,
		},
		{
			name: "handler error",
			handle: func(out *Topic[string, string], m Message[string, string]) ([]Emission, error) {
				return nil, errBoom
			},
			want: errBoom,
		},
		{
			name: "panic",
			handle: func(out *Topic[string, string], m Message[string, string]) ([]Emission, error) {
				panic("boom")
			},
			want: ErrPanic,
		},
		{
			name: "codec failure",
			handle: func(out *Topic[string, string], m Message[string, string]) ([]Emission, error) {
				bad := NewTopic("out", String(), Of(func(string) ([]byte, error) { return nil, errBoom }, String().Decode))
				return []Emission{bad.Send(m.Key, m.Value)}, nil
			},
			want: ErrCodec,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, broker.Topic{Name: "in"}, broker.Topic{Name: "out"})
			in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
			var calls atomic.Int64
			st := On(Named("s"), in, func(m Message[string, string]) ([]Emission, error) {
				calls.Add(1)
				if m.Offset == 0 && !tc.corrupt {
					return []Emission{out.Send(m.Key, m.Value)}, nil
				}
				return tc.handle(out, m)
			}).Into(out).MustBuild()
			e.changelogs(1, st)
			second := rec("in", 0, "k", "b")
			if tc.corrupt {
				second.Headers = []kgo.RecordHeader{{Key: "vc", Value: []byte{0xff, 0x00}}}
			}
			e.produce(rec("in", 0, "k", "a"), second)
			r := e.start(e.config("i1"), st)
			err, done := r.exited(30 * time.Second)
			if !done {
				t.Fatal("Run did not stop")
			}
			var se *StepError
			if !errors.As(err, &se) {
				t.Fatalf("Run returned %v (%T), want a *StepError", err, err)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Run returned %v, want it to wrap %v", err, tc.want)
			}
			if se.Stage != "s" || se.Topic != "in" || se.Partition != 0 || se.Offset != 1 {
				t.Fatalf("StepError names stage %q %s[%d]@%d, want s in[0]@1", se.Stage, se.Topic, se.Partition, se.Offset)
			}
			if msg := err.Error(); !strings.Contains(msg, `"s"`) || !strings.Contains(msg, "in[0]@1") {
				t.Fatalf("error %q does not name the stage and coordinate", msg)
			}
			if tc.corrupt && calls.Load() != 1 {
				t.Fatalf("handler called %d times; the corrupt record must never be delivered", calls.Load())
			}
			// The first record's output was in the aborted step too.
			if got := e.readCommitted("out", 1, 500*time.Millisecond); len(got) != 0 {
				t.Fatalf("aborted step left %d records visible on out", len(got))
			}
		})
	}
}

var errBoom = errors.New("boom")

// TestRetryOnErrorReprocesses: under RetryOnError a failing step is
// aborted and retried from committed state; once the failure clears the
// record is processed exactly once.
func TestRetryOnErrorReprocesses(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in"}, broker.Topic{Name: "out"})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	var failures atomic.Int64
	st := On(Named("s"), in, func(m Message[string, string]) ([]Emission, error) {
		if m.Value == "flaky" && failures.Add(1) <= 3 {
			return []Emission{out.Send(m.Key, "partial")}, fmt.Errorf("transient: attempt %d", failures.Load())
		}
		return []Emission{out.Send(m.Key, m.Value)}, nil
	}).Into(out).MustBuild()
	e.changelogs(1, st)
	cfg := e.config("i1")
	cfg.OnStepError = RetryOnError
	r := e.start(cfg, st)
	e.produce(rec("in", 0, "k", "a"), rec("in", 0, "k", "flaky"), rec("in", 0, "k", "c"))
	got := values(e.readExactly("out", 3, 30*time.Second))
	if strings.Join(got, ",") != "a,flaky,c" {
		t.Fatalf("out = %q, want a, flaky, c", got)
	}
	if failures.Load() < 4 {
		t.Fatalf("handler failed %d times, want 3 failures and a success", failures.Load())
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
}

// TestRecoveringRoutesDomainFailures: a Recovering handler's error becomes
// an emission to the error sink, committed with the step.
func TestRecoveringRoutesDomainFailures(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in"}, broker.Topic{Name: "out"}, broker.Topic{Name: "rejects"})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	rejects := NewTopic("rejects", String(), String())
	st := On(Named("s"), in, Recovering(func(m Message[string, string]) ([]Emission, error) {
		if m.Value == "bad" {
			return nil, errors.New("refused")
		}
		return []Emission{out.Send(m.Key, m.Value)}, nil
	}, func(m Message[string, string], err error) []Emission {
		return []Emission{rejects.Send(m.Key, m.Value+": "+err.Error())}
	})).Into(out, rejects).MustBuild()
	e.changelogs(1, st)
	r := e.start(e.config("i1"), st)
	e.produce(rec("in", 0, "k", "a"), rec("in", 0, "k", "bad"), rec("in", 0, "k", "c"))
	if got := values(e.readExactly("out", 2, 30*time.Second)); strings.Join(got, ",") != "a,c" {
		t.Fatalf("out = %q", got)
	}
	if got := values(e.readExactly("rejects", 1, 10*time.Second)); got[0] != "bad: refused" {
		t.Fatalf("rejects = %q", got)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
}
