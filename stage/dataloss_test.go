package stage

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestDataLossStopsRun: when the group's committed offset of a source
// partition lies past the partition's end — the brokers lost records the
// application had consumed and committed — Run stops with a
// *DataLossError naming the partition and both offsets, instead of letting
// the client rewind to its reset offset and failing the feed (#21 defect
// 4). Before the fix Run stopped with a StepError wrapping
// protocol.ErrOutOfOrderFeed. Both a fresh instance and one restarting
// over its own store see it.
func TestDataLossStopsRun(t *testing.T) {
	for _, restart := range []bool{false, true} {
		name := "fresh store"
		if restart {
			name = "restart over its store"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, broker.Topic{Name: "in"}, broker.Topic{Name: "out"})
			in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
			var seen collector
			st := On(Named("s"), in, func(m Message[string, string]) ([]Emission, error) {
				seen.add(coordString(m.Topic, m.Partition, m.Offset))
				return []Emission{out.Send(m.Key, m.Value)}, nil
			}).Into(out).MustBuild()
			e.changelogs(1, st)
			e.produce(rec("in", 0, "k", "a"), rec("in", 0, "k", "b"), rec("in", 0, "k", "c"))
			if restart {
				r := e.start(e.config("i1"), st)
				e.readExactly("out", 3, 20*time.Second)
				if err := r.stop(); err != nil {
					t.Fatal(err)
				}
			}
			// The brokers lose the tail: the committed offset now lies
			// past the log end (an unclean election would truncate the
			// log below it; moving the commit up has the same effect).
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if restart {
				// A static member stays in the group after it stops;
				// an operator's offset reset removes it first.
				if _, err := e.c.Admin().LeaveGroup(ctx, kadm.LeaveGroup(e.app).InstanceIDs("i1")); err != nil {
					t.Fatal(err)
				}
			}
			var moved kadm.Offsets
			moved.Add(kadm.Offset{Topic: "in", Partition: 0, At: 10, LeaderEpoch: -1})
			if err := e.c.Admin().CommitAllOffsets(ctx, e.app, moved); err != nil {
				t.Fatal(err)
			}
			before := seen.len()
			r := e.start(e.config("i1"), st)
			err, ok := r.exited(30 * time.Second)
			if !ok {
				t.Fatal("Run did not stop on data loss")
			}
			var dl *DataLossError
			if !errors.Is(err, ErrDataLoss) || !errors.As(err, &dl) {
				t.Fatalf("Run = %v, want a *DataLossError", err)
			}
			if dl.Topic != "in" || dl.Partition != 0 || dl.Consumed != 10 || dl.LogEnd != 3 || dl.Group != e.app {
				t.Errorf("DataLossError = %+v, want in[0] consumed 10, log end 3, group %q", dl, e.app)
			}
			for _, want := range []string{"in[0]", "offset 10", "offset 3", "reset group", "backup"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not say %q: %v", want, err)
				}
			}
			if got := seen.snapshot()[before:]; len(got) != 0 {
				t.Errorf("after the loss the handler saw %q, want nothing", got)
			}
		})
	}
}

// TestDataLossMidRun: the two ways a running client reveals data loss —
// franz-go's *kgo.ErrDataLoss fetch error, and a rewind that feeds a node
// offsets it has already seen while the committed offset lies past the log
// end — become a fatal *DataLossError; an out-of-order feed with the
// committed offset inside the log stays what it was.
func TestDataLossMidRun(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in"}, broker.Topic{Name: "out"})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := On(Named("s"), in, func(m Message[string, string]) ([]Emission, error) { return nil, nil }).Into(out).MustBuild()
	if _, err := New(e.config("i1"), st); err != nil {
		t.Fatal(err)
	}
	ps := positions{group: e.app, cluster: &kafkaCluster{Client: e.c.Admin()}}
	e.produce(rec("in", 0, "k", "a"), rec("in", 0, "k", "b"))

	lossErr := &kgo.ErrDataLoss{Topic: "in", Partition: 0, ConsumedTo: 7, ResetTo: 2}
	dl := fetchDataLoss(e.app, "in", 0, lossErr)
	if dl == nil || dl.Consumed != 7 || dl.LogEnd != 2 || !errors.Is(dl, ErrDataLoss) || !errors.Is(dl, lossErr) {
		t.Errorf("fetchDataLoss = %+v, want in[0] consumed 7, log end 2, wrapping the client's error", dl)
	}
	if dl := fetchDataLoss(e.app, "in", 0, errBoom); dl != nil {
		t.Errorf("fetchDataLoss(other error) = %v, want nil", dl)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	feedErr := &StepError{Stage: "s", Topic: "in", Partition: 0, Offset: 0, Err: protocol.ErrOutOfOrderFeed}
	commit := func(at int64) {
		var o kadm.Offsets
		o.Add(kadm.Offset{Topic: "in", Partition: 0, At: at, LeaderEpoch: -1})
		if err := e.c.Admin().CommitAllOffsets(ctx, e.app, o); err != nil {
			t.Fatal(err)
		}
	}
	commit(2)
	if got := ps.explainOutOfOrder(ctx, feedErr); got != error(feedErr) {
		t.Errorf("committed inside the log: explainOutOfOrder = %v, want the step error itself", got)
	}
	commit(9)
	got := ps.explainOutOfOrder(ctx, feedErr)
	var f *fatal
	if !errors.As(got, &f) || !errors.As(got, &dl) || dl.Consumed != 9 || dl.LogEnd != 2 || !errors.Is(got, protocol.ErrOutOfOrderFeed) {
		t.Errorf("committed past the end: explainOutOfOrder = %v, want a fatal *DataLossError (9 past 2) wrapping the feed error", got)
	}
}
