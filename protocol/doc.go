// Package protocol is Parsley's causal node: the state machine that decides
// when a fetched record may reach user logic, and what every record a node
// sends claims.
//
// A node consumes a fixed set of channels (topic partitions) and sends to a
// fixed set of sink topics. Each consumed channel has a FIFO hold queue, and
// only queue heads are ever evaluated. A head is delivered when the node's
// frontier — per consumed channel, the offset below which everything was
// delivered or skipped — dominates every offset claim of the head's clock on
// a channel the node consumes, and the node has delivered, from every sender
// a sequence claim names, a record at or past the claimed sequence. Claims on
// the head's own channel are ignored (per-channel FIFO already orders them),
// and so are claims on channels the node does not consume: every upstream
// stamp folds the full clock of everything it received, so any consumed
// ancestor of a record is claimed directly in its clock. A delivery raises
// the frontier and the cascade re-evaluates every head until nothing more is
// deliverable.
//
// A read_committed consumer does not see every offset: transaction markers
// and aborted records occupy offsets that never arrive. The node folds such
// runs into the frontier when it can prove them skipped: below a queue's head
// (everything under the head was delivered, the rest was skipped), and below
// a reported consumer position when the queue is empty.
//
// Every record the node sends carries a stamp from PrepareSend: the highest
// delivered record of each input, the clocks of everything received, the
// ancestry of channels it no longer consumes, the acknowledged sends of its
// prior incarnations (reported by the host through Sent), and sequence
// claims on its own sends to its other sink channels, whose offsets it
// cannot know yet. Every offset it names is a committed record, never a
// transaction marker, an aborted record or the log end (parsley.causes
// constraint 8); a sender's sequences only increase, even across a reset
// of its state. The stamp is tagged with the node's sender
// identity and the send's sequence on its channel, which is how receivers
// resolve sequence claims.
//
// # The node is pure
//
// Like etcd's raft package, the node does no I/O of its own, reads no clock,
// starts no goroutine and draws no random number. It reads and writes a Store
// the host gives it, asks the host's BrokerOffsets for sink end offsets (at New)
// and log starts (TruncateToLogStarts), and otherwise only returns values:
// deliveries in the order to process them, and stamps. Nothing depends on Go
// map iteration order; the same configuration, store contents, broker answers
// and calls give the same deliveries, stamps and store writes, byte for byte.
//
// # Host contract
//
// The node is sound only under these host duties (H1–H6 of the Java
// reference's conformance kit). No API can enforce them; a host that breaks
// one breaks causal order or liveness silently.
//
//   - H1. Feed records to OnRecord per channel in strictly increasing offset
//     order, as a read_committed consumer returns them. (Lower offsets after
//     higher ones are refused with ErrOutOfOrderFeed within one node; across
//     a restart, offsets at or below the frontier are replays and dropped.)
//   - H2. Report the consumer's position through PositionAdvance whenever it
//     may have moved past offsets that never arrive as records (markers,
//     aborted records) — but only after every record fetched below that
//     position has been fed to OnRecord. A position reported early makes the
//     node treat unfed records as skipped and drop them as replays; a
//     position never reported can leave a claim on a trailing marker waiting
//     forever.
//   - H3. Make each step atomic: call Flush at the end of the step, then
//     commit the store's writes together with the consumed offsets and every
//     record sent in the step (one Kafka transaction). If the commit fails or
//     the process crashes, discard the node and build a new one from the
//     committed store (H5); never carry a node's memory across an aborted
//     step. Batch stages a step's writes for hosts that need them as a list.
//   - H4. Partition before stamping: call PrepareSend with the concrete
//     destination partition, attach exactly that stamp (headers.AppendStamp,
//     vc dialect), and send the record in the same step. Sequence claims rely
//     on every stamped send being appended, or aborted with the step. Report
//     each send's acknowledged offset through Sent before Flush, so it
//     commits with the send; later incarnations claim it as an own output.
//     (A host that reports none falls back to claiming sink end offsets:
//     sound, but it names markers.)
//   - H5. Restart through New: it restores the store and the own outputs
//     (the acknowledged sends), and rescopes against the recorded inputs and
//     sinks. Then call Release once, fetch each input from the higher of
//     the committed position and ResumePositions (clamped to the log start,
//     H6), and report that start position through PositionAdvance for every
//     input before feeding records. The node does not persist positions: a
//     new incarnation knows nothing of markers below its start position, so
//     without this report a claim naming a trailing marker below the
//     committed position, or an offset below the log start, waits forever.
//     The simulator's reference host does exactly this.
//   - H6. Respect the log start: a position below a channel's log start
//     resets to the first surviving offset, and retention must not delete
//     records an active consumer has not fetched yet.
//
// Deliveries are processed in the order returned, each handed to user logic
// with its own record and coordinate; the outputs of that logic are stamped
// with PrepareSend after the delivery that caused them.
//
// # Memory and the store
//
// A held record is written verbatim to the store — key, value, every header,
// timestamp, offset, with nil and empty kept distinct — at the next Flush. In
// memory the queue then keeps a 32-byte skeleton per record; the record is
// read back from the store when it becomes the head. The store layout is
// documented in codec.go and versioned; an unknown version fails New with
// ErrUnknownStateFormat.
//
// # Errors
//
// Every error is an *Error naming the coordinate, channel, topic or store key
// at fault, wrapping a sentinel (ErrUndeclaredChannel, ErrOutOfOrderFeed,
// ...), headers.ErrUndecodable, or the Store's or BrokerOffsets' own error.
// Refusals of bad input (an undecodable stamp, an undeclared channel or sink,
// an out-of-order feed) change nothing: the node stays usable. A Store error
// in the middle of a step leaves the node failed; every later call returns
// ErrNodeFailed.
package protocol
