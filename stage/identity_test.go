package stage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/state"
	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestStampsCarryIdentityAndOwnOutputs: every emission is stamped with the
// task's sender identity, derived from (application, stage, partition) and
// the same after a restart, with increasing send sequences; and a restarted
// task's first emission claims the sends of its previous incarnation (own
// outputs seeded from the sink's end offset).
func TestStampsCarryIdentityAndOwnOutputs(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in"}, broker.Topic{Name: "out"})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := On(Named("echo"), in, func(m Message[string, string]) ([]Emission, error) {
		return []Emission{out.Send(m.Key, m.Value)}, nil
	}).Into(out).MustBuild()
	e.changelogs(1, st)
	cfg := e.config("i1")
	e.produce(rec("in", 0, "k", "a"), rec("in", 0, "k", "b"))
	r := e.start(cfg, st)
	first := e.readExactly("out", 2, 20*time.Second)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	e.produce(rec("in", 0, "k", "c"))
	r = e.start(cfg, st)
	all := e.readExactly("out", 3, 20*time.Second)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	wantSender := protocol.SenderIDFor(cfg.ApplicationID, "echo", 0)
	outID, err := e.c.TopicID(context.Background(), "out")
	if err != nil {
		t.Fatal(err)
	}
	outCh := headers.Channel{Topic: outID, Partition: 0}
	var seqs []int64
	for _, o := range all {
		s, err := clock.ReadRecordStamp(o)
		if err != nil {
			t.Fatal(err)
		}
		if !s.Tagged || s.Sender != wantSender {
			t.Fatalf("output %q sender %v (tagged %v), want %v", o.Value, s.Sender, s.Tagged, wantSender)
		}
		seqs = append(seqs, s.Seq)
	}
	if !(seqs[0] < seqs[1] && seqs[1] < seqs[2]) {
		t.Fatalf("send sequences %v do not increase across the restart", seqs)
	}
	s, _ := clock.ReadRecordStamp(all[2])
	claimed, ok := s.Clock.Offset(outCh)
	if !ok || claimed < first[1].Offset {
		t.Fatalf("the restarted task's first emission claims out@%d (present %v); want at least %d, its predecessor's last send", claimed, ok, first[1].Offset)
	}
}

// TestUnknownStateSchemaStopsRun: a task store written by an unknown schema
// version stops Run with an error saying so, instead of guessing.
func TestUnknownStateSchemaStopsRun(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in"}, broker.Topic{Name: "out"})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := On(Named("echo"), in, func(m Message[string, string]) ([]Emission, error) { return nil, nil }).Into(out).MustBuild()
	e.changelogs(1, st)
	cfg := e.config("i1")
	if err := os.MkdirAll(filepath.Dir(storePath(cfg.StateDir, e.app, "echo", 0)), 0o755); err != nil {
		t.Fatal(err)
	}
	path := storePath(cfg.StateDir, e.app, "echo", 0)
	s, err := state.Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	setUserVersion(t, path, 7)
	r := e.start(cfg, st)
	err, done := r.exited(20 * time.Second)
	if !done {
		t.Fatal("Run kept going over a store of unknown schema")
	}
	if !errors.Is(err, ErrUnknownStateSchema) {
		t.Fatalf("Run = %v, want ErrUnknownStateSchema", err)
	}
}

// TestTruncationSweepDropsClaimsBelowLogStart: a claim on a channel the
// stage does not consume travels in its stamps until the claimed records
// fall below the log start; the next sweep drops it.
func TestTruncationSweepDropsClaimsBelowLogStart(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "far"}, broker.Topic{Name: "up"}, broker.Topic{Name: "out"})
	up, out := NewTopic("up", String(), String()), NewTopic("out", String(), String())
	st := On(Named("relay"), up, func(m Message[string, string]) ([]Emission, error) {
		return []Emission{out.Send(m.Key, m.Value)}, nil
	}).Into(out).MustBuild()
	e.changelogs(1, st)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var fars []*kgo.Record
	for range 10 {
		fars = append(fars, rec("far", 0, "f", "x"))
	}
	e.produce(fars...)
	clk := clock.New(e.c.Admin())
	if err := clk.Produced(ctx, "far", 0, 5); err != nil {
		t.Fatal(err)
	}
	first := rec("up", 0, "k", "1")
	if err := clk.Stamp(ctx, first); err != nil {
		t.Fatal(err)
	}
	e.produce(first)
	cfg := e.config("i1")
	cfg.TruncateInterval = time.Millisecond
	r := e.start(cfg, st)
	farID, err := e.c.TopicID(ctx, "far")
	if err != nil {
		t.Fatal(err)
	}
	farCh := headers.Channel{Topic: farID, Partition: 0}
	claims := func(o *kgo.Record) bool {
		s, err := clock.ReadRecordStamp(o)
		if err != nil {
			t.Fatal(err)
		}
		_, ok := s.Clock.Offset(farCh)
		return ok
	}
	if o := e.readExactly("out", 1, 20*time.Second)[0]; !claims(o) {
		t.Fatal("the first emission does not carry the upstream claim on far; nothing to truncate")
	}
	del := kadm.Offsets{}
	del.Add(kadm.Offset{Topic: "far", Partition: 0, At: 8})
	if _, err := e.c.Admin().DeleteRecords(ctx, del); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	e.produce(rec("up", 0, "k", "2"))
	outs := e.readExactly("out", 2, 20*time.Second)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if claims(outs[1]) {
		t.Fatal("a claim below far's log start survived the sweep")
	}
}
