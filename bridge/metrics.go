package bridge

import "github.com/prometheus/client_golang/prometheus"

// metrics are the bridge's Prometheus collectors.
type metrics struct {
	latency    prometheus.Histogram
	inFlight   prometheus.Gauge
	published  prometheus.Counter
	duplicates prometheus.Counter
	failures   prometheus.Counter
	retries    prometheus.Counter

	orderViolations prometheus.Counter
}

func newMetrics(stream string) *metrics {
	l := prometheus.Labels{"stream": stream}
	return &metrics{
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "parsley_bridge_publish_seconds", ConstLabels: l,
			Help:    "Time from a publish to its JetStream acknowledgement (in batch mode, of a whole batch).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "parsley_bridge_publishes_in_flight", ConstLabels: l,
			Help: "Publishes awaiting their JetStream acknowledgement (in batch mode, the messages of the batch being sent).",
		}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parsley_bridge_published_total", ConstLabels: l,
			Help: "Publishes JetStream acknowledged (duplicates included).",
		}),
		duplicates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parsley_bridge_duplicates_total", ConstLabels: l,
			Help: "Publishes JetStream acknowledged as duplicates of a stored message (redeliveries absorbed by Nats-Msg-Id; in FastBatch mode only the records of batches found stored whole).",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parsley_bridge_publish_failures_total", ConstLabels: l,
			Help: "Publishes that failed or were not acknowledged in time.",
		}),
		retries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parsley_bridge_step_retries_total", ConstLabels: l,
			Help: "Steps aborted because a publish failed, to be processed again after a backoff.",
		}),
		orderViolations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "parsley_bridge_order_violations_total", ConstLabels: l,
			Help: "Records the stream stores after a record whose stamp claims them as a cause (possible only in PerMessage mode with MaxInFlight above 1 and a broken connection; not checked in FastBatch mode, whose acknowledgements carry no sequence per record).",
		}),
	}
}

func (m *metrics) collectors() collectors {
	return collectors{m.latency, m.inFlight, m.published, m.duplicates, m.failures, m.retries, m.orderViolations}
}

// Describe and Collect make the metrics one prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) { m.collectors().Describe(ch) }
func (m *metrics) Collect(ch chan<- prometheus.Metric) { m.collectors().Collect(ch) }

// collectors is several collectors as one.
type collectors []prometheus.Collector

func (cs collectors) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range cs {
		c.Describe(ch)
	}
}

func (cs collectors) Collect(ch chan<- prometheus.Metric) {
	for _, c := range cs {
		c.Collect(ch)
	}
}
