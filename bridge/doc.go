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
// changelog — commits only after JetStream acknowledged the step. If
// publishing fails (NATS down, a timeout, a connection broken in the
// middle of a step), the step aborts and is processed again from
// committed state after a backoff that doubles up to a bound: the bridge
// blocks rather than drop or skip a record.
//
// What holds under any failure is causal order across the stream: no
// record is stored after a record whose stamp claims it as a cause. A redo
// may deliver concurrent records in another order than an attempt the
// stream already stored, and the stream keeps the stored attempt's order.
//
// # Publish modes
//
// Config.Publish chooses how a step reaches JetStream; there are three:
//
//   - AtomicBatch, the default: each step as one atomic JetStream batch
//     (at most the server's max_batch_size, 1,000 by default, which the
//     bridge learns from the server; a larger step as consecutive batches),
//     which the stream stores whole and in delivered order or not at all.
//     Choose it unless the stream cannot take it: subscribers never see
//     part of a step that did not commit. It needs NATS Server 2.12 and a
//     stream with allow_atomic; AtomicBatchOrPerMessage falls back to
//     PerMessage, with a warning, on a stream without.
//   - PerMessage: record by record, each awaiting its acknowledgement
//     (Config.MaxInFlight 1), for streams that allow neither kind of
//     batch. MaxInFlight above 1 pipelines the publishes and keeps each
//     subject's order, but not the causal order across subjects when a
//     connection breaks mid-window, which the order-violation metric
//     counts.
//   - FastBatch: each step as one JetStream fast batch in gap-fail mode,
//     stored as it arrives: the fastest on an R1 file stream, where atomic
//     batches are staged in a file of their own, with the order of
//     PerMessage at MaxInFlight 1. Choose it for throughput when readers
//     may see a delivered-order prefix of a step that then fails (the redo
//     absorbs it by message ID). It needs NATS Server 2.14 and a stream
//     with allow_batched.
//
// Startup refuses a stream whose duplicate window is shorter than
// Config.RedeliveryHorizon (a redelivery after the window would be stored
// twice), a stream without atomic publish in the default mode or without
// batched publish in FastBatch mode, and a subject mapping that sends a
// source partition to a subject the stream does not capture.
//
// A step is sized as a stage's step (Config.MaxPollRecords,
// Config.CommitInterval, Config.MaxStepRecords): it polls and publishes
// until its commit interval passed or it holds its record budget, and
// commits at once when nothing more is fetched.
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
