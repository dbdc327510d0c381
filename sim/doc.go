// Package sim is Parsley's deterministic simulator and causal oracle: the
// protocol's primary correctness gate, and a conformance kit for other
// hosts and vendored copies of the protocol.
//
// A real broker gives no control over interleavings and no ground truth,
// so it cannot prove causal order. The simulator can. A Broker models
// partitions with real offset occupancy — business records, transaction
// markers and aborted records all take offsets, and a read_committed fetch
// returns only business records — so the protocol's density adaptation runs
// on essentially every world. SimNode hosts a Protocol exactly as a stage
// task does (host duties H1–H6 of the protocol package): every step is one
// transaction committing store, positions and sends together, and a crash
// aborts all three; a restart goes through the full init path. EdgeProducer
// scripts plain clients. World draws every enabled action — fetch, position
// advance, tick, producer operation, crash, restart, retention, truncation
// — from a generator seeded per run, so a seed determines its run exactly;
// topic IDs are drawn from the seed too, half of them with the sign bit
// set, so Java's signed ID order differs from byte order.
//
// The Oracle never reads a clock. It records, for every record appended,
// the emitter's real causal past (everything delivered or observed there
// plus its own prior sends, transitively closed), staged and rolled back
// with the emitter's transaction, and judges every delivery: causal order
// (every ancestor on a consumed channel at or above the node's baseline was
// delivered there first), per-channel FIFO, no duplicates, and the
// delivered bytes are the fetched bytes; on an input a redeploy grew, no
// delivery of history the node carried there (Reentered); at drain,
// completeness and empty hold queues. A world that does not drain within its step budget fails as
// wedged.
//
// The host judges what deliveries alone do not show: every stamp at send
// time, against the sender's real past (StampGap); the gate's watermarks
// after every protocol call, when the protocol offers them through
// Inspector (Invariant); and ResumePositions at every restart, against the
// oracle's own bound of what the node delivered or carries (LostOnResume),
// which is also where the oracle's baseline comes from.
//
// # Using it as a conformance kit
//
// RunScenario runs one Scenario with one seed and returns a Result whose
// Violations must be empty. Options.NewProtocol substitutes the protocol
// implementation (a vendored copy, or a deliberately broken one);
// Options.Fault makes the reference host shirk one duty. The kit's own
// tests show the oracle flags EagerProtocol (V8) and every HostFault (V9),
// and Scenarios lists the suite a conforming implementation must pass with
// its anti-vacuity floors. See docs/verification.md.
package sim
