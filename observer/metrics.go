package observer

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the observer's Prometheus collectors. They are registered
// by the caller through Observer.Collector, so several observers can live
// in one process, each in a registry of its own.
type metrics struct {
	ingested prometheus.Counter
	lag      *prometheus.GaugeVec
	findings *prometheus.GaugeVec
}

func newMetrics() *metrics {
	m := &metrics{
		ingested: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parsley_observer_records_ingested_total",
			Help: "Records (transaction markers included) stored by the observer.",
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "parsley_observer_lag_records",
			Help: "High watermark minus the observer's position, per observed partition, at the last fetch.",
		}, []string{"topic", "partition"}),
		findings: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "parsley_observer_findings",
			Help: "Findings at the last evaluation, by code.",
		}, []string{"code"}),
	}
	for _, c := range AllCodes() {
		m.findings.WithLabelValues(string(c)).Set(0)
	}
	return m
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.ingested, m.lag, m.findings}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// setFindings publishes the count of findings per code.
func (m *metrics) setFindings(fs []Finding) {
	n := map[Code]int{}
	for _, f := range fs {
		n[f.Code]++
	}
	for _, c := range AllCodes() {
		m.findings.WithLabelValues(string(c)).Set(float64(n[c]))
	}
}
