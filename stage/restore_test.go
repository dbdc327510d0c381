package stage

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/prometheus/client_golang/prometheus"
)

// TestRestoreOffTheStepPath: while one task's restore is slow, the
// instance's other task processes; the slow task reports Restoring in
// Tasks, in the parsley_task_restoring gauge and in /readyz; once its
// restore ends it processes too, and every record is counted once.
func TestRestoreOffTheStepPath(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := counterStage(in, out)
	e.changelogs(2, st)
	a, err := New(e.config("i1"), st)
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	a.hooks.restore = func(ctx context.Context, _ string, p int32) {
		if p == 1 {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
	}
	want := e.inputs("in", 20, 4, 2, 0) // keys k0, k2 on 0; k1, k3 on 1
	r := e.startApp(a)
	got := e.readCommitted("out", 10, 30*time.Second)
	for _, rec := range got {
		if k := string(rec.Key); k != "k0" && k != "k2" {
			t.Fatalf("output for %s, of partition 1, while partition 1 restores", k)
		}
	}
	if len(got) != 10 {
		t.Fatalf("partition 0 produced %d outputs while partition 1 restored, want its 10", len(got))
	}
	ts := a.Tasks()
	if len(ts) != 2 || ts[0].Restoring || !ts[1].Restoring {
		t.Errorf("Tasks() = %+v, want count/0 active and count/1 restoring", ts)
	}
	if ok, why := a.Readiness(); ok || !strings.Contains(why, "task count/1 restoring") || strings.Contains(why, "count/0") {
		t.Errorf("Readiness() = %v %q, want not ready naming only count/1 restoring", ok, why)
	}
	if a.Ready() {
		t.Error("Ready() while a task restores for the first time")
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(a.Collector())
	m := scrape(t, reg)
	if m[metricRestoring][taskLabels("count", 1)] != 1 || m[metricRestoring][taskLabels("count", 0)] != 0 {
		t.Errorf("%s = %v, want count/1 1 and count/0 0", metricRestoring, m[metricRestoring])
	}

	close(release)
	outs := e.readExactly("out", 20, 30*time.Second)
	checkCounts(t, outs, want)
	waitFor(t, 10*time.Second, "ready", func() bool { ok, _ := a.Readiness(); return ok && a.Ready() })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
}
