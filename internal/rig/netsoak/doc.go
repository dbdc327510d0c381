// Package netsoak is the network-fault soak: a causal pipeline on the
// embedded broker whose every stage instance reaches the broker through its
// own fault-injecting TCP proxy (Toxiproxy, in-process), a seeded schedule
// of faults on those links, and an oracle that judges the run from outside.
//
// The pipeline: a plain franz-go producer stamped with clock writes orders
// and payments (some inside transactions held open for a while, some
// aborted); a stateful stage "settle" on three instances counts records per
// key; a stage "audit" downstream of it re-emits what settle wrote; and the
// bridge forwards audit's output to a JetStream stream on an embedded NATS
// server. The faults: latency spikes, connection resets right after a
// transaction's commit request is written (its answer is lost), an instance
// cut off for longer than its session timeout while it keeps running (a
// zombie), a link throttled until a transaction times out, and a link
// dropped while a wiped instance restores.
//
// The oracle reads only the output topics (read_committed), the NATS stream
// and the producer's ground truth — never a clock or a stamp — and checks
// that nothing was lost or duplicated, no aborted record was delivered,
// every causal pair is in order at every stage and in the stream, and the
// per-key state is exact.
//
// Run it with `go run ./internal/rig/netsoak/cmd/netsoak` (see
// docs/verification.md); `go test ./internal/rig/netsoak` runs the oracle's
// self-check and a short smoke run.
package netsoak
