package view

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// Collector returns a Prometheus collector of the view's progress, labelled
// by changelog topic and partition: parsley_view_applied_offset,
// parsley_view_lag (offsets behind the high watermark as last fetched),
// parsley_view_ready (1 once caught up), parsley_view_keys, and the
// counters parsley_view_records_applied_total and
// parsley_view_transactions_applied_total. It reads the view when
// scraped, as the stage's App.Collector does.
func (v *View[K, S]) Collector() prometheus.Collector { return &collector[K, S]{v: v, d: newDescs()} }

type descs struct {
	applied, lag, ready, keys, records, txns *prometheus.Desc
}

func newDescs() descs {
	pl := []string{"topic", "partition"}
	return descs{
		applied: prometheus.NewDesc("parsley_view_applied_offset", "Changelog offset past the last commit the view applied.", pl, nil),
		lag:     prometheus.NewDesc("parsley_view_lag", "Offsets the view trails the changelog partition's high watermark by.", pl, nil),
		ready:   prometheus.NewDesc("parsley_view_ready", "1 once the partition's replica caught up with the changelog as of Run's start.", pl, nil),
		keys:    prometheus.NewDesc("parsley_view_keys", "Keys with state in the partition's replica.", pl, nil),
		records: prometheus.NewDesc("parsley_view_records_applied_total", "Changelog data records the view applied.", []string{"topic"}, nil),
		txns:    prometheus.NewDesc("parsley_view_transactions_applied_total", "Changelog transactions the view applied.", []string{"topic"}, nil),
	}
}

type collector[K, S any] struct {
	v *View[K, S]
	d descs
}

func (c *collector[K, S]) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.d.applied, c.d.lag, c.d.ready, c.d.keys, c.d.records, c.d.txns} {
		ch <- d
	}
}

func (c *collector[K, S]) Collect(ch chan<- prometheus.Metric) {
	v := c.v
	v.mu.RLock()
	defer v.mu.RUnlock()
	for p, r := range v.parts {
		ps := strconv.Itoa(int(p))
		ready := 0.0
		if r.ready {
			ready = 1
		}
		ch <- prometheus.MustNewConstMetric(c.d.applied, prometheus.GaugeValue, float64(r.applied()), v.topic, ps)
		ch <- prometheus.MustNewConstMetric(c.d.lag, prometheus.GaugeValue, float64(max(r.hwm-r.applied(), 0)), v.topic, ps)
		ch <- prometheus.MustNewConstMetric(c.d.ready, prometheus.GaugeValue, ready, v.topic, ps)
		ch <- prometheus.MustNewConstMetric(c.d.keys, prometheus.GaugeValue, float64(r.folds), v.topic, ps)
	}
	ch <- prometheus.MustNewConstMetric(c.d.records, prometheus.CounterValue, float64(v.stats.records), v.topic)
	ch <- prometheus.MustNewConstMetric(c.d.txns, prometheus.CounterValue, float64(v.stats.txns), v.topic)
}
