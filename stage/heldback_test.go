package stage

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
)

// TestSingleInstanceHoldsNothingBack: one instance that is assigned every
// partition pauses them only while its tasks restore, as every start does.
// That is no news and must not be logged as partitions "held back" for
// lacking source partitions, the INFO that reads like a fault.
func TestSingleInstanceHoldsNothingBack(t *testing.T) {
	const parts = 3
	e := newEnv(t, broker.Topic{Name: "orders", Partitions: parts}, broker.Topic{Name: "out", Partitions: parts})
	out := NewTopic("out", String(), String())
	st := On(Named("settle"), NewTopic("orders", String(), String()), func(m Message[string, string]) ([]Emission, error) {
		return []Emission{out.Send(m.Key, m.Value)}, nil
	}).Into(out).MustBuild()
	e.changelogs(parts, st)
	logs := new(syncBuffer)
	cfg := e.config("i1")
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r := e.start(cfg, st)
	for p := range int32(parts) {
		e.produce(rec("orders", p, "k", "v"))
	}
	e.readExactly("out", parts, 30*time.Second)
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if len(logs.lines("msg=")) == 0 {
		t.Fatal("the stage logged nothing; the test cannot see its log")
	}
	if held := logs.lines("held back"); len(held) > 0 {
		t.Errorf("a single instance with every partition logged partitions held back:\n%s", strings.Join(held, ""))
	}
}
