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
	"github.com/parsley-go/parsley/internal/broker"
	"github.com/parsley-go/parsley/internal/state"
	"github.com/parsley-go/parsley/protocol"
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
	if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cfg.StateDir, "echo-0.db")
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
