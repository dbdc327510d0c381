// Package state is the local, changelogged key/value store behind a stage
// task: a SQLite file that holds the task's protocol state, held records and
// fold state, plus the changelog machinery that makes the Kafka transaction
// the single commit point.
//
// SQLite cannot join a Kafka transaction. So every write of a step is also
// produced, inside the step's transaction, to a compacted changelog topic
// (one partition per task), and the SQLite write transaction commits only
// after Kafka committed, together with the changelog offset it reflects:
// the checkpoint. A task that starts — after a crash, on another instance,
// or with its file deleted — first replays the changelog from its checkpoint
// to the end (Restore), so a crash between the Kafka commit and the SQLite
// commit loses nothing. A checkpoint is only trusted while it is younger
// than the changelog's tombstone retention (delete.retention.ms, less a
// margin): compaction may have removed deletes written after an older one,
// so Restore wipes such a store and replays the changelog from its start.
// A store also records which incarnation of its changelog it mirrors (topic
// ID and cluster ID): offsets of a recreated topic, or of another cluster,
// say nothing about it, so such a store is wiped too; a changelog of the
// same incarnation that ends before the checkpoint lost committed records,
// and Restore refuses it with a *ChangelogLostError.
//
// The package owns the layout of a task's store (keys.go: the fold keys,
// the tick slot, the changelog topic's name) and the one changelog
// follower (Follower): a restore, a standby's Tailer and a view in another
// process all apply the changelog through it, each committed transaction
// whole at its commit marker, into a Sink — a Store (StoreSink) or a
// view's map.
//
// The store runs in WAL mode with synchronous=NORMAL (durability comes from
// the changelog) over a single connection: one writer, and a task is never
// used by two goroutines. Reads of committed values go through a cache
// bounded in bytes (CacheBytes); Prefetch fills it with many keys a query. The schema is versioned with SQLite's user_version;
// a file written by an unknown version is refused with ErrUnknownSchema.
package state
