package observer

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the observer's Prometheus collectors. They are registered
// by the caller through Observer.Collector, so several observers can live
// in one process, each in a registry of its own.
type metrics struct {
	health   *healthState
	up       *prometheus.Desc
	age      *prometheus.Desc
	ingested prometheus.Counter
	lag      *prometheus.GaugeVec
	findings *prometheus.GaugeVec
	severity *prometheus.GaugeVec
	// partitions is set for a shard of a group only.
	partitions *prometheus.GaugeVec
}

// newMetrics returns the metrics of an observer; a shard of a group labels
// every one with shard, its instance name, so that a dashboard sums them
// across the group (each finding is counted by the one shard recording
// it).
func newMetrics(h *healthState, shard string) *metrics {
	var labels prometheus.Labels
	if shard != "" {
		labels = prometheus.Labels{"shard": shard}
	}
	m := &metrics{
		health: h,
		up: prometheus.NewDesc("parsley_observer_up",
			"1 if the observer's last probe read the cluster's topic metadata and offsets, else 0.", nil, labels),
		age: prometheus.NewDesc("parsley_observer_last_fetch_age_seconds",
			"Seconds since the observer last fetched records of the topic or found it had read all of it.", []string{"topic"}, labels),
		ingested: prometheus.NewCounter(prometheus.CounterOpts{
			Name:        "parsley_observer_records_ingested_total",
			Help:        "Records (transaction markers included) stored by the observer.",
			ConstLabels: labels,
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name:        "parsley_observer_lag_records",
			Help:        "High watermark minus the observer's position, per observed partition, at the last fetch.",
			ConstLabels: labels,
		}, []string{"topic", "partition"}),
		findings: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name:        "parsley_observer_findings",
			Help:        "Open findings (condition holds, not acknowledged) at the last evaluation, by code; a shard counts those it records.",
			ConstLabels: labels,
		}, []string{"code"}),
		severity: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name:        "parsley_observer_findings_by_severity",
			Help:        "Open findings (condition holds, not acknowledged) at the last evaluation, by severity (a code's findings can differ: a claim on a marker is info, past the log end an error); a shard counts those it records.",
			ConstLabels: labels,
		}, []string{"severity"}),
	}
	if shard != "" {
		m.partitions = prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name:        "parsley_observer_partitions",
			Help:        "Partitions assigned to this shard of a group, by state: reading (read up to the log end it had when assigned) or catching_up.",
			ConstLabels: labels,
		}, []string{"state"})
		m.partitions.WithLabelValues("reading").Set(0)
		m.partitions.WithLabelValues("catching_up").Set(0)
	}
	for _, c := range AllCodes() {
		m.findings.WithLabelValues(string(c)).Set(0)
	}
	for _, sev := range []Severity{SeverityInfo, SeverityWarning, SeverityError} {
		m.severity.WithLabelValues(sev.String()).Set(0)
	}
	return m
}

func (m *metrics) collectors() []prometheus.Collector {
	cs := []prometheus.Collector{m.ingested, m.lag, m.findings, m.severity}
	if m.partitions != nil {
		cs = append(cs, m.partitions)
	}
	return cs
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.up
	ch <- m.age
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	h := m.health.get()
	up := 0.0
	if h.Up {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(m.up, prometheus.GaugeValue, up)
	now := time.Now()
	for _, t := range h.Topics {
		at, ok := h.LastFetch[t]
		if !ok {
			at = m.health.started // never fetched: as old as the observer
		}
		age := now.Sub(at).Seconds()
		ch <- prometheus.MustNewConstMetric(m.age, prometheus.GaugeValue, age, t)
	}
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}

// setFindings publishes the count of open findings per code and
// severity: acknowledged and resolved ones no longer page.
func (m *metrics) setFindings(fs []Finding) {
	n := map[Code]int{}
	bySeverity := map[Severity]int{}
	for _, f := range fs {
		if !f.Open() {
			continue
		}
		n[f.Code]++
		bySeverity[f.Severity]++
	}
	for _, c := range AllCodes() {
		m.findings.WithLabelValues(string(c)).Set(float64(n[c]))
	}
	for _, sev := range []Severity{SeverityInfo, SeverityWarning, SeverityError} {
		m.severity.WithLabelValues(sev.String()).Set(float64(bySeverity[sev]))
	}
}
