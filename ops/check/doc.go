// Package check tests the deployment files under ops/ — the Kubernetes
// manifest against the Kubernetes and Prometheus Operator API types, and
// its agreement with the example config file — in a module of its own,
// so the main module carries none of those dependencies. Run it with
// `cd ops/check && go test ./...`; .ci/run does.
package check
