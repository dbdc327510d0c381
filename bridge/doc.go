// Package bridge forwards Kafka records to NATS JetStream in causal order,
// exactly once.
//
// A bridge is a causal consumer whose sink is a JetStream stream. It runs
// as a stage (package stage): the same consumer group, co-partitioned
// tasks, causal gate, SQLite state and changelog. Each record the gate
// delivers is published to the subject the Config's mapping gives it, in
// delivered order, with
//
//   - Nats-Msg-Id set to the record's coordinate (topicID/partition@offset),
//     so JetStream absorbs the redelivery of a record whose step was
//     published but not committed (a crash, an outage mid-step);
//   - Parsley-Coordinate: topic/partition@offset, by topic name;
//   - every Kafka header copied: the stamp headers (vc, vc-sender, vc-seq,
//     parsley.*) byte for byte in base64, since they are binary and NATS
//     headers are text; other headers as they are when they are text, in
//     base64 otherwise, named in Parsley-Base64-Headers;
//   - Parsley-Key (base64) when the record has a key, and
//     Parsley-Timestamp (Unix milliseconds).
//
// A step's Kafka transaction — consumed offsets, protocol state and
// changelog — commits only after JetStream acknowledged every publish of
// the step. If a publish fails (NATS down, a timeout, a reconnect in the
// middle of the step), the step aborts and is processed again from
// committed state after a backoff that doubles up to a bound: the bridge
// blocks rather than drop or skip a record. By default each publish waits
// for the previous acknowledgement, so the stream's order is the delivered
// order under any failure; Config.MaxInFlight above 1 pipelines publishes
// (at most one per subject in flight) and keeps each subject's order under
// any failure, but not the order across subjects when a connection breaks
// mid-window (see docs/bridge.md; the order-violation metric counts it).
//
// Startup refuses a stream whose duplicate window is shorter than
// Config.RedeliveryHorizon (a redelivery after the window would be stored
// twice) and a subject mapping that sends a source partition to a subject
// the stream does not capture.
//
// The bridge can also be the sink of a stage application that does other
// work in the same transaction: NewSink and Forward.
//
// Scope: as for every stage, a bridge task consumes partition p of every
// source topic, and causal order holds among the records one task
// consumes. Causes produced on another partition number are not waited
// for. Key causally related records alike across topics (or use
// single-partition topics) when subscribers need order across all of them.
package bridge
