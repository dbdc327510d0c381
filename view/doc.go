// Package view is a read-only, causally consistent replica of a stage's
// state, built in any process from the stage's changelog.
//
// A stage task writes its changelog in the same Kafka transaction as its
// outputs and its protocol state — what each consumed channel has
// delivered. A View reads that changelog read_committed and applies each
// partition's records only at a transaction's commit marker, so at every
// moment it holds, per task, the state of some committed step: never an
// aborted or half-applied one, and never an older one than it held before.
//
// Because the protocol state travels with the fold state, the view knows
// which input offsets every task's state reflects. A Token is a writer's
// causal past (the channels and offsets of a clock.Clock, as it stamps
// them); GetAfter returns a key's state only once the task that owns the
// key has delivered every record of the token on a channel it consumes,
// and, when its context ends first, says what it still waits for.
//
// Run fills the view and follows the changelog; Get answers once the key's
// partition is ready (a *NotReadyError before), token reads wait for Run
// when it is not running, and Close stops the view for good.
package view
