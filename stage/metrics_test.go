package stage

import (
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// series is one scraped sample: its labels (rendered k=v, sorted) and value.
type series map[string]float64

// scrape gathers reg and returns, per metric name, each series keyed by
// its labels rendered "k=v,k=v" in sorted order.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]series {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]series{}
	for _, f := range fams {
		s := series{}
		for _, m := range f.GetMetric() {
			var ls []string
			for _, l := range m.GetLabel() {
				ls = append(ls, l.GetName()+"="+l.GetValue())
			}
			sort.Strings(ls)
			s[strings.Join(ls, ",")] = value(f.GetType(), m)
		}
		out[f.GetName()] = s
	}
	return out
}

func value(typ dto.MetricType, m *dto.Metric) float64 {
	switch typ {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue()
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue()
	case dto.MetricType_HISTOGRAM:
		return float64(m.GetHistogram().GetSampleCount())
	}
	return -1
}

func taskLabels(stage string, p int) string {
	return fmt.Sprintf("application=app,partition=%d,stage=%s", p, stage)
}

// TestMetricsScrape: a registry with the app's collector shows each metric
// of docs/metrics.md with the stage and partition labels and the values the
// run implies — delivered counts, a held record and its age by the
// injected clock, the per-topic breakdown, stamp widths, step counts — and
// a task's series go when the task moves to another instance.
func TestMetricsScrape(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "a", Partitions: 2}, broker.Topic{Name: "b", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	out := NewTopic("out", String(), String())
	b := Named("m")
	for _, n := range []string{"a", "b"} {
		On(b, NewTopic(n, String(), String()), func(m Message[string, string]) ([]Emission, error) {
			return []Emission{out.Send(m.Key, m.Value)}, nil
		})
	}
	st := b.Into(out).MustBuild()
	e.changelogs(2, st)
	e.produce(rec("a", 0, "k", "a0"), rec("a", 0, "k", "a1"), rec("a", 0, "k", "a2"), rec("a", 1, "k", "a3"))
	var s headers.Stamp
	s.Clock.SetOffset(headers.Channel{Topic: e.topicID("a"), Partition: 0}, 10) // not yet appended
	e.produce(stamped(t, "b", 0, "k", "b0", &s))

	clk := newManualClock()
	cfg := e.config("i1")
	cfg.WallClock = clk.Now
	a, err := New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	loop := onLoop(a)
	r := e.startApp(a)
	reg := prometheus.NewRegistry()
	reg.MustRegister(r.app.Collector())

	waitFor(t, 20*time.Second, "four deliveries and a hold", func() bool {
		m := scrape(t, reg)
		return m[metricDelivered][taskLabels("m", 0)] == 3 && m[metricDelivered][taskLabels("m", 1)] == 1 &&
			m[metricHeld][taskLabels("m", 0)] == 1
	})
	clk.Advance(5 * time.Second)
	m := scrape(t, reg)
	want := map[string]series{
		metricHeld:          {taskLabels("m", 0): 1, taskLabels("m", 1): 0},
		metricHeldAge:       {taskLabels("m", 0): 5000, taskLabels("m", 1): 0},
		metricTopicHeld:     {taskLabels("m", 0) + ",topic=b": 1},
		metricTopicHeldAge:  {taskLabels("m", 0) + ",topic=b": 5000},
		metricDelivered:     {taskLabels("m", 0): 3, taskLabels("m", 1): 1},
		metricReplays:       {taskLabels("m", 0): 0, taskLabels("m", 1): 0},
		metricSweepsSkipped: {taskLabels("m", 0): 0, taskLabels("m", 1): 0},
		metricTicks:         {taskLabels("m", 0): 0, taskLabels("m", 1): 0},
	}
	for name, ws := range want {
		got := m[name]
		if len(got) != len(ws) {
			t.Errorf("%s: series %v, want %v", name, got, ws)
			continue
		}
		for l, v := range ws {
			if g, ok := got[l]; !ok || g != v {
				t.Errorf("%s{%s} = %v (present %v), want %v", name, l, g, ok, v)
			}
		}
	}
	// The stamp widths are the node's: the held record's clock claims
	// a[0]@10, so partition 0's stamp-side clock has an offset entry more
	// than partition 1's.
	loop.do(t, func() {
		for id, tk := range r.app.tm.tasks {
			c := tk.node.Counters()
			l := taskLabels("m", int(id.partition))
			if m[metricStampOffsets][l] != float64(c.StampOffsetEntries) || m[metricStampSeqs][l] != float64(c.StampSeqEntries) {
				t.Errorf("task %d: stamp gauges %v/%v, node has %d/%d", id.partition, m[metricStampOffsets][l], m[metricStampSeqs][l], c.StampOffsetEntries, c.StampSeqEntries)
			}
		}
	})
	if m[metricStampOffsets][taskLabels("m", 0)] <= m[metricStampOffsets][taskLabels("m", 1)] {
		t.Errorf("stamp offset entries %v: partition 0 should carry the claim on a[0]@10", m[metricStampOffsets])
	}
	commits := m[metricStepCommits]["application=app"]
	if commits < 1 {
		t.Errorf("step commits %v", m[metricStepCommits])
	}
	if _, ok := m[metricStepAborts]["application=app"]; !ok {
		t.Errorf("no step aborts series: %v", m[metricStepAborts])
	}
	if h := m[metricStepLatency]["application=app"]; h < commits {
		t.Errorf("step latency histogram has %v samples, fewer than %v commits", h, commits)
	}

	// A second instance takes one task: its series leave the first.
	r2 := e.start(e.config("i2"), st)
	waitFor(t, 30*time.Second, "a task to move", func() bool {
		return len(r.app.Tasks()) == 1 && len(r2.app.Tasks()) == 1
	})
	waitFor(t, 10*time.Second, "the moved task's series to go", func() bool {
		return len(scrape(t, reg)[metricDelivered]) == 1
	})
	m = scrape(t, reg)
	kept := r.app.Tasks()[0].Partition
	for _, name := range []string{metricHeld, metricHeldAge, metricDelivered, metricReplays, metricSweepsSkipped, metricTicks, metricStampOffsets, metricStampSeqs} {
		if _, ok := m[name][taskLabels("m", int(kept))]; len(m[name]) != 1 || !ok {
			t.Errorf("%s after the move: %v, want only partition %d", name, m[name], kept)
		}
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if m := scrape(t, reg); len(m[metricDelivered]) != 0 {
		t.Errorf("series after Run returned: %v", m[metricDelivered])
	}
}
