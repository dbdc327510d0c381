package observer

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the observer's Prometheus collectors, in a registry of its
// own so several observers can live in one process.
type Metrics struct {
	Registry *prometheus.Registry
	ingested prometheus.Counter
	lag      *prometheus.GaugeVec
	findings *prometheus.GaugeVec
}

func newMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
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
	m.Registry.MustRegister(m.ingested, m.lag, m.findings)
	for _, c := range Codes {
		m.findings.WithLabelValues(string(c)).Set(0)
	}
	return m
}

// setFindings publishes the count of findings per code.
func (m *Metrics) setFindings(fs []Finding) {
	n := map[Code]int{}
	for _, f := range fs {
		n[f.Code]++
	}
	for _, c := range Codes {
		m.findings.WithLabelValues(string(c)).Set(float64(n[c]))
	}
}
