package bridge

import (
	"context"

	"github.com/nats-io/nats.go"
)

// mode is how a publisher gets a step's messages to JetStream: one
// implementation per way the stream can take them, each in its own file,
// chosen by open from Config.Publish and what the stream allows:
//
//   - atomicBatches (batch.go, AtomicBatch): the step as atomic batches,
//     stored whole or not at all;
//   - perMessage (permessage.go, PerMessage): record by record, up to
//     MaxInFlight awaiting acknowledgement, one per subject;
//   - fastBatches (fastbatch.go, FastBatch): the step as one fast batch,
//     stored as it arrives, ending at the first failure.
//
// A mode keeps the state of what it has in flight; the publisher keeps
// the step's records (p.step), its first failure (p.failed) and the
// connection epoch, which the mode reads and sets through its publisher.
// Only the stage's step goroutine calls a mode's methods.
type mode interface {
	// begin gives up, or waits out within ctx, what an aborted step left
	// open or in flight.
	begin(ctx context.Context)
	// send appends rec to p.step and gets msg, its message, to JetStream
	// (or stages it for settle). A failure of NATS is kept in p.failed;
	// once it is set, send publishes nothing more.
	send(ctx context.Context, msg *nats.Msg, rec storedRecord)
	// settle waits until everything sent since begin is stored, giving
	// each record of p.step its stream sequence where the acknowledgement
	// names one, or sets p.failed. It leaves nothing open.
	settle(ctx context.Context)
}
