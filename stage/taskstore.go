package stage

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/parsley-go/parsley/internal/state"
	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kgo"
)

// taskStore is a task's state: its SQLite file, the open step's writes (the
// batch the task's node reads and writes), and the committed steps' writes
// not yet in the file (below). The session loop owns it, except while a
// restore's job runs, which owns kv until it is done (taskManager); clNext
// is raised by the changelog's produce promises under the env's send lock.
//
// The step batch reads the committed state (the unwritten writes over the
// file), and its mutations are the step's changelog: flush sends them, and
// after a commit they join the unwritten writes and the batch empties;
// after an abort the batch is dropped and the node rebuilt.
type taskStore struct {
	env       *taskEnv
	name      string // the stage's, for messages
	partition int32
	changelog string
	kv        *state.Store

	batch   *protocol.Batch     // the open step's writes; nil before the first build
	flushed []protocol.Mutation // the batch's mutations as flush sent them; nil: not flushed
	clNext  int64               // one past the last changelog offset produced in the step; -1 none
	promise func(*kgo.Record, error)

	// Committed steps' writes not yet in kv, the highest changelog
	// checkpoint among them (-1 none), how many steps they span and what
	// they cost in bytes.
	pending      *protocol.Batch
	pendingCP    int64
	pendingSteps int
	pendingBytes int64
}

func newTaskStore(env *taskEnv, name string, p int32, changelog string, kv *state.Store) taskStore {
	return taskStore{env: env, name: name, partition: p, changelog: changelog, kv: kv, clNext: -1}
}

// Committed steps' writes reach the SQLite file a few steps at a time.
//
// The changelog is the durable copy of a task's state and the file a cache
// of it: restore replays the changelog from the file's checkpoint. So the
// file may lag the committed steps, as long as what the task reads is the
// committed state. A committed step's writes join the task's unwritten
// writes, a batch over the file that the step batch reads through, and
// those are written in one SQLite transaction every storeEvery steps, when
// they hold storeMaxKeys keys or unwrittenBound(kv) bytes, when the file's
// checkpoint time is checkpointRefresh old, and when the task closes. Keys written by every
// step (the node's frontiers, sequences and acknowledged sends; a fold's
// hot keys) then cost one row write per few steps, not one per step.
//
// A crash loses at most the unwritten steps, which the restore replays
// from the changelog: the checkpoint written with them is the highest
// changelog offset of the steps they merge, and its time the time the
// writing step began, so every changelog record past the checkpoint is
// written after that time, as Store.Apply requires.
const (
	storeEvery        = 32      // committed steps per SQLite transaction, at most
	storeMaxKeys      = 1 << 16 // unwritten keys that write at once (the byte bound is usually first)
	storeCloseTimeout = 10 * time.Second

	// unwrittenMin is the least byte bound of the unwritten writes, so a
	// small or disabled state cache still groups a few steps' writes.
	unwrittenMin = 1 << 20
	// unwrittenOverhead is what one unwritten key costs besides its key
	// and value bytes: its map entry in the batch and the Mutation's
	// string and slice headers. An estimate that errs high.
	unwrittenOverhead = 96
)

// unwrittenBound is how many bytes of unwritten writes a task over kv
// holds at most between steps: a quarter of its state cache, at least
// unwrittenMin. With SQLite's page cache (another quarter) a task's state
// costs about 1.5 × StateCache of memory beyond what one step holds
// (Config.StateCache).
func unwrittenBound(kv *state.Store) int64 { return max(kv.CacheLimit()/4, unwrittenMin) }

// mutationBytes is what m costs held in a batch (unwrittenOverhead).
func mutationBytes(m protocol.Mutation) int64 {
	return int64(len(m.Key)+len(m.Value)) + unwrittenOverhead
}

// unwritten returns the task's committed writes not yet in the file.
func (s *taskStore) unwritten() *protocol.Batch {
	if s.pending == nil {
		s.pending = protocol.NewBatch(s.kv)
		s.pendingCP = -1
	}
	return s.pending
}

// committed returns the committed state a step reads: the unwritten
// writes over the file, read through committedReads.
func (s *taskStore) committed() protocol.Store { return committedReads{s.unwritten()} }

// beginStep starts the open step's batch over the committed state: a
// node (re)built now reads and writes it.
func (s *taskStore) beginStep() *protocol.Batch {
	s.kv.DropCache() // a rebuilt node reads the file, nothing remembered from before
	s.batch = protocol.NewBatch(s.committed())
	s.flushed = nil
	s.clNext = -1
	return s.batch
}

// dropStep drops the open step's writes: it aborted, or the task closes.
func (s *taskStore) dropStep() {
	if s.batch != nil {
		s.batch.Discard()
	}
	s.flushed = nil
	s.clNext = -1
}

// sendChangelog produces the step's mutations to the changelog, last
// write per key, inside the step's transaction.
func (s *taskStore) sendChangelog(ctx context.Context, p producer) {
	s.flushed = s.batch.Mutations() // sorted once: the changelog's, then the commit's
	rs := state.Records(s.changelog, s.partition, s.flushed)
	if s.promise == nil {
		s.promise = s.changelogPromise // bound once: a method value per record allocates
	}
	s.env.sent.produced += len(rs)
	for i := range rs {
		p.Produce(ctx, &rs[i], s.promise)
	}
}

func (s *taskStore) changelogPromise(r *kgo.Record, err error) {
	s.env.sent.promise(r, err)
	if err == nil {
		s.env.sent.raise(&s.clNext, r.Offset+1)
	}
}

// committedReads reads the unwritten writes over the file, handing out
// copies. The unwritten writes keep the very slices the steps put (a
// fold's encoded state, the node's held records), and what a read returns
// reaches user code: a fold's state codec may decode into a value that
// aliases its input and update it in place (zero-copy encodings do), and a
// held record's value codec may alias the record. Handed the kept slice,
// such code would write into committed state, and an aborted step's update
// would survive into its retry and the changelog. The file's reads are
// copies already (state.Store.Get), for the same reason.
type committedReads struct{ p *protocol.Batch }

func (c committedReads) Get(key string) ([]byte, bool, error) {
	if m, ok := c.p.Staged(key); ok {
		if m.Delete {
			return nil, false, nil
		}
		return bytes.Clone(m.Value), true, nil
	}
	// The file's (a copy), read past the lookup Get would repeat: in a
	// large state the unwritten writes hold tens of thousands of keys and
	// each lookup is a cache miss.
	return c.p.Base().Get(key)
}

func (c committedReads) Scan(prefix string, fn func(key string, value []byte) error) error {
	return c.p.Scan(prefix, func(k string, v []byte) error {
		if _, ok := c.p.Staged(k); ok {
			v = bytes.Clone(v)
		}
		return fn(k, v)
	})
}

// Put is refused: a step's writes stay in its batch until commit moves
// them into the unwritten writes.
func (c committedReads) Put(key string, _ []byte) error {
	return fmt.Errorf("stage: put %q into committed state outside a commit", key)
}

// Delete is refused, as Put.
func (c committedReads) Delete(key string) error {
	return fmt.Errorf("stage: delete %q from committed state outside a commit", key)
}

// commit takes in the committed step's writes and changelog checkpoint and
// writes the unwritten ones to the file when due. began is the wall-clock
// time the step began: every changelog record past the new checkpoint is
// written after it.
func (s *taskStore) commit(ctx context.Context, began time.Time) error {
	if s.batch == nil {
		return nil
	}
	p := s.unwritten()
	for _, m := range s.stepMutations() {
		if old, ok := p.Staged(m.Key); ok {
			s.pendingBytes -= mutationBytes(old)
		}
		if m.Delete {
			_ = p.Delete(m.Key) // a Batch write never fails
		} else {
			_ = p.Put(m.Key, m.Value)
		}
		s.pendingBytes += mutationBytes(m)
	}
	if cp := s.env.sent.load(&s.clNext); cp >= 0 {
		s.pendingCP = max(s.pendingCP, cp)
	}
	s.batch.Discard()
	s.flushed = nil
	s.clNext = -1
	if p.Len() > 0 || s.pendingCP >= 0 {
		s.pendingSteps++
	}
	due := s.pendingSteps >= storeEvery || p.Len() >= storeMaxKeys || s.pendingBytes >= unwrittenBound(s.kv) ||
		began.Sub(s.kv.CheckpointTime()) >= checkpointRefresh
	if !due {
		return nil
	}
	if err := s.writeUnwritten(ctx, began); err != nil {
		return fmt.Errorf("stage %q partition %d: %w", s.name, s.partition, err)
	}
	return nil
}

// stepMutations returns the committed step's writes: those flush sorted
// and sent to the changelog, or the batch's when the step was not flushed
// (tests commit batches directly).
func (s *taskStore) stepMutations() []protocol.Mutation {
	if s.flushed != nil && len(s.flushed) == s.batch.Len() {
		return s.flushed
	}
	return s.batch.Mutations()
}

// writeUnwritten writes the unwritten steps and their checkpoint to the
// file in one transaction, with at as the checkpoint time (the zero Time
// keeps the file's). On failure they stay unwritten.
func (s *taskStore) writeUnwritten(ctx context.Context, at time.Time) error {
	p := s.unwritten()
	if err := s.kv.Apply(ctx, p.Mutations(), s.pendingCP, at); err != nil {
		return err
	}
	p.Discard()
	s.pendingCP, s.pendingSteps, s.pendingBytes = -1, 0, 0
	return nil
}

// close drops the open step's writes, writes what is unwritten and closes
// the file. A failed write only makes the next restore replay more of the
// changelog.
func (s *taskStore) close() {
	s.dropStep()
	if s.pending != nil && (s.pending.Len() > 0 || s.pendingCP >= 0) {
		ctx, cancel := context.WithTimeout(context.Background(), storeCloseTimeout)
		// The zero time keeps the file's checkpoint time: no step is
		// beginning whose time could stand for the unwritten records.
		if err := s.writeUnwritten(ctx, time.Time{}); err != nil {
			s.env.log.Warn("stage: write committed state at close; the next restore replays it from the changelog",
				"stage", s.name, "partition", s.partition, "err", err)
		}
		cancel()
	}
	if err := s.kv.Close(); err != nil {
		s.env.log.Warn("stage: close store", "stage", s.name, "partition", s.partition, "err", err)
	}
}
