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
// By default a step's records are published as one atomic JetStream batch
// (at most 1,000 messages; a larger step as consecutive batches), which
// the stream stores whole and in delivered order or not at all. A step's
// Kafka transaction — consumed offsets, protocol state and changelog —
// commits only after JetStream acknowledged the step. If publishing fails
// (NATS down, a timeout, a connection broken in the middle of a batch),
// the step aborts and is processed again from committed state after a
// backoff that doubles up to a bound: the bridge blocks rather than drop
// or skip a record.
//
// What holds under any failure is causal order across the stream: no
// record is stored after a record whose stamp claims it as a cause. A redo
// may deliver concurrent records in another order than an attempt the
// stream already stored, and the stream keeps the stored attempt's order.
// Config.Publish selects PerMessage publishing instead (for streams that
// do not allow atomic publish); there Config.MaxInFlight above 1 keeps
// each subject's order but not the causal order across subjects when a
// connection breaks mid-window, which the order-violation metric counts.
// FastBatch publishes each step as one JetStream fast batch in gap-fail
// mode, stored as it arrives: faster than atomic batches on an R1 file
// stream, with the order of PerMessage at MaxInFlight 1, and a failed
// step can leave a delivered-order prefix of itself stored.
//
// Startup refuses a stream whose duplicate window is shorter than
// Config.RedeliveryHorizon (a redelivery after the window would be stored
// twice), a stream without atomic publish in the default mode or without
// batched publish in FastBatch mode, and a subject mapping that sends a
// source partition to a subject the stream does not capture.
//
// A Bridge exposes what it is doing as a stage application does: Tasks,
// ExplainHolds, Ready (not latched: false again while it rejoins),
// HealthHandler and one Collector of its metrics.
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
