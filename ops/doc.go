// Package ops holds no code: it is the home of the shipped operations
// files — Prometheus alert rules (prometheus/parsley-alerts.yml) and a
// Grafana dashboard (grafana/parsley-dashboard.json) for Parsley stages and
// parsley-observe — and of the test that keeps them true to the metrics
// the code exports.
package ops
