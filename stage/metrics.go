package stage

// Prometheus metrics: the collector over the published snapshot, and the
// step latency histogram.

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metric names follow the Java library's vc-metrics names, with the prefix
// parsley_ and underscores (docs/metrics.md): the hold gauges are what
// to alert on, because a stage's own consumer lag never shows holding.
// Task series carry the labels stage and partition; the per-topic hold
// gauges add topic. Task series exist while the instance runs the task:
// when a task leaves (rebalance, shutdown) its series go with it.
const (
	metricHeld           = "parsley_records_held"
	metricHeldAge        = "parsley_records_held_age_max_ms"
	metricTopicHeld      = "parsley_topic_records_held"
	metricTopicHeldAge   = "parsley_topic_records_held_age_max_ms"
	metricDelivered      = "parsley_records_delivered_total"
	metricReplays        = "parsley_replays_skipped_total"
	metricSweepsSkipped  = "parsley_truncation_sweeps_skipped_total"
	metricTicks          = "parsley_ticks_emitted_total"
	metricStampOffsets   = "parsley_stamp_offset_entries"
	metricStampSeqs      = "parsley_stamp_sequence_entries"
	metricStepCommits    = "parsley_step_commits_total"
	metricStepAborts     = "parsley_step_aborts_total"
	metricStepLatency    = "parsley_step_duration_seconds"
	metricScopeCrossings = "parsley_cross_task_claims_total"
	metricRestoring      = "parsley_task_restoring"
	metricStandby        = "parsley_task_standby"
	metricStandbyLag     = "parsley_task_standby_lag"
	labelStage           = "stage"
	labelPartition       = "partition"
	labelTopic           = "topic"
	labelApplicationName = "application"
	labelClaimedTopic    = "claimed_topic"
)

// Collector returns a Prometheus collector of the application's metrics.
// Register it once with the registry you serve:
//
//	reg.MustRegister(app.Collector())
//
// Gauges are read from the snapshot the runtime publishes after every step
// and idle poll; counters count committed steps only, so an aborted step's
// deliveries are not counted twice when they are redone.
func (a *App) Collector() prometheus.Collector {
	return &metricsCollector{a: a, d: newDescs(a.cfg.ApplicationID)}
}

type descs struct {
	held, heldAge, topicHeld, topicHeldAge           *prometheus.Desc
	delivered, replays, sweepsSkipped, ticks         *prometheus.Desc
	stampOffsets, stampSeqs, stepCommits, stepAborts *prometheus.Desc
	scopeCrossings                                   *prometheus.Desc
	restoring, standby, standbyLag                   *prometheus.Desc
}

func newDescs(app string) *descs {
	cl := prometheus.Labels{labelApplicationName: app}
	task := []string{labelStage, labelPartition}
	topic := []string{labelStage, labelPartition, labelTopic}
	d := func(name, help string, labels []string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, cl)
	}
	return &descs{
		held:          d(metricHeld, "Records currently held across the task's hold queues.", task),
		heldAge:       d(metricHeldAge, "Milliseconds the longest-gating head record has been held, from when it became its queue's head.", task),
		topicHeld:     d(metricTopicHeld, "Records currently held on this source topic's channel.", topic),
		topicHeldAge:  d(metricTopicHeldAge, "Milliseconds this channel's head record has been held.", topic),
		delivered:     d(metricDelivered, "Records released through the causal gate in committed steps.", task),
		replays:       d(metricReplays, "Records fed at or below the frontier and discarded, in committed steps.", task),
		sweepsSkipped: d(metricSweepsSkipped, "Truncation sweeps that failed and skipped their cycle.", task),
		ticks:         d(metricTicks, "Tick records the task emitted in committed steps.", task),
		stampOffsets:  d(metricStampOffsets, "Offset entries in the stamp-side clock.", task),
		stampSeqs:     d(metricStampSeqs, "Sequence entries in the stamp-side clock: claims not yet resolved to offsets.", task),
		stepCommits:   d(metricStepCommits, "Steps (transactions) committed by this instance.", nil),
		stepAborts:    d(metricStepAborts, "Steps (transactions) aborted by this instance.", nil),
		scopeCrossings: d(metricScopeCrossings, "Records delivered in committed steps that claim an offset on another partition of a source topic of the stage, "+
			"a cause another task consumes and this one does not wait for, while murmur2 of their key names another partition than the one they are on.",
			[]string{labelStage, labelTopic, labelClaimedTopic}),
		restoring:  d(metricRestoring, "1 while the task's store is being restored from its changelog (it processes nothing), 0 once it is active.", task),
		standby:    d(metricStandby, "1 for a task this instance keeps a standby copy of (Config.Standbys), 0 for a task it runs.", task),
		standbyLag: d(metricStandbyLag, "Changelog offsets a standby copy trails the task's changelog by, as of its last poll; -1 until it first caught up.", task),
	}
}

type metricsCollector struct {
	a *App
	d *descs
}

func (c *metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	d := c.d
	for _, x := range []*prometheus.Desc{d.held, d.heldAge, d.topicHeld, d.topicHeldAge, d.delivered, d.replays,
		d.sweepsSkipped, d.ticks, d.stampOffsets, d.stampSeqs, d.stepCommits, d.stepAborts, d.scopeCrossings, d.restoring, d.standby, d.standbyLag} {
		ch <- x
	}
	c.a.status.latency.h.Describe(ch)
}

func (c *metricsCollector) Collect(ch chan<- prometheus.Metric) {
	a, d := c.a, c.d
	ch <- prometheus.MustNewConstMetric(d.stepCommits, prometheus.CounterValue, float64(a.status.commits.Load()))
	ch <- prometheus.MustNewConstMetric(d.stepAborts, prometheus.CounterValue, float64(a.status.aborts.Load()))
	a.status.latency.h.Collect(ch)
	for _, c := range a.scope.snapshot() {
		ch <- prometheus.MustNewConstMetric(d.scopeCrossings, prometheus.CounterValue, float64(c.n), c.stage, c.topic, c.claimed)
	}
	snap := a.status.snap.Load()
	if snap == nil {
		return
	}
	now := a.cfg.WallClock()
	for i := range snap.tasks {
		t := &snap.tasks[i]
		p := strconv.Itoa(int(t.partition))
		gauge := func(desc *prometheus.Desc, v float64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, append([]string{t.stage, p}, extra...)...)
		}
		counter := func(desc *prometheus.Desc, v uint64) {
			ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), t.stage, p)
		}
		var oldest time.Duration
		for _, h := range t.holds {
			age := max(now.Sub(h.Since), 0)
			oldest = max(oldest, age)
			gauge(d.topicHeld, float64(h.Depth), h.Topic)
			gauge(d.topicHeldAge, float64(age.Milliseconds()), h.Topic)
		}
		gauge(d.held, float64(t.held))
		restoring := 0.0
		if t.restoring {
			restoring = 1
		}
		gauge(d.restoring, restoring)
		gauge(d.standby, 0)
		gauge(d.heldAge, float64(oldest.Milliseconds()))
		gauge(d.stampOffsets, float64(t.stampOffsets))
		gauge(d.stampSeqs, float64(t.stampSeqs))
		counter(d.delivered, t.delivered)
		counter(d.replays, t.replays)
		counter(d.sweepsSkipped, t.sweepsSkipped)
		counter(d.ticks, t.ticks)
	}
	for _, s := range snap.standbys {
		p := strconv.Itoa(int(s.partition))
		ch <- prometheus.MustNewConstMetric(d.standby, prometheus.GaugeValue, 1, s.stage, p)
		ch <- prometheus.MustNewConstMetric(d.standbyLag, prometheus.GaugeValue, float64(s.lag), s.stage, p)
	}
}

// stepLatency is the step duration histogram, from Begin to the end of the
// transaction (real clock).
type stepLatency struct{ h prometheus.Histogram }

func newStepLatency(app string) *stepLatency {
	return &stepLatency{h: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:        metricStepLatency,
		ConstLabels: prometheus.Labels{labelApplicationName: app},
		Help:        "Duration of a step: begin transaction, feed, user logic, sends, end transaction.",
		Buckets:     prometheus.ExponentialBuckets(0.001, 2, 15),
	})}
}

func (s *stepLatency) observe(d time.Duration) { s.h.Observe(d.Seconds()) }
