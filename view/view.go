package view

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/parsley-go/parsley/internal/kafkahash"
	"github.com/parsley-go/parsley/internal/state"
	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Config says which stage's state a view replicates and how to reach the
// brokers. New refuses a Config with an error wrapping ErrInvalidConfig
// for each field at fault.
type Config struct {
	// ApplicationID and Stage name the stage whose changelog
	// (stage.ChangelogTopic) the view reads. Both are required, and are
	// names as a stage's are: letters, digits, '.', '_' and '-'.
	ApplicationID, Stage string
	// Brokers are the seed brokers (required, none empty).
	Brokers []string
	// ClientOpts are added to every client the view makes (TLS, SASL,
	// ...); the view's own consume settings come after them. Default:
	// none.
	ClientOpts []kgo.Opt
	// Partitions, when set, limits the view to these tasks' partitions
	// (each at least 0, none twice); a key another task owns is then
	// ErrNotReplicated. Default: every partition of the changelog.
	Partitions []int32
	// StateDir, when set, keeps each partition's replica in a SQLite file
	// too, <StateDir>/<ApplicationID>/<Stage>-view-<partition>.db, with the
	// changelog offset it reflects and which changelog it mirrors (topic
	// ID and cluster ID), so a restarted view replays only the changelog's
	// tail. The file is checked as a task's store is: one that mirrors
	// another incarnation of the changelog, or whose checkpoint is older
	// than the changelog's delete.retention.ms allows, is wiped and
	// rebuilt; one whose changelog ends before its checkpoint (the brokers
	// lost committed records) stops Run with an error naming the file, and
	// leaves the file alone.
	//
	// Views, and stage instances, may share a StateDir: each file is one
	// application's, stage's and partition's. Two views that replicate the
	// same partition of the same stage may not: while one's Run holds a
	// file, another's Run fails at once with ErrStateInUse naming it (on
	// systems with flock; elsewhere nothing stops them).
	//
	// Default: none; the replicas are in memory only, and every Run
	// replays the whole changelog.
	StateDir string
}

// ErrInvalidConfig is wrapped by New's errors for a Config it refuses.
var ErrInvalidConfig = errors.New("view: invalid configuration")

// ErrNotReplicated: the key's owning partition is not among the view's
// Config.Partitions.
var ErrNotReplicated = errors.New("view: partition not replicated by this view")

// ErrNotRunning is wrapped by GetAfter's *WaitError when the view's Run was
// not running when the wait ended: it had not started, or had returned.
var ErrNotRunning = errors.New("view: not running")

// ErrClosed is returned by a View's methods, and by its Run, once Close was
// called.
var ErrClosed = errors.New("view: closed")

// ErrStateInUse is wrapped when Run cannot lock a file under
// Config.StateDir because another view holds it.
var ErrStateInUse = errors.New("view: state file in use by another view")

// ErrNotReady is wrapped by a *NotReadyError.
var ErrNotReady = errors.New("view: not ready")

// NotReadyError is Get's error for a key whose owning partition's replica
// has not caught up with the changelog as it was when Run started (the
// partition's Ready in Status), or before Run has listed the changelog's
// partitions at all. Retry later, or wait with WaitReady. It wraps
// ErrNotReady.
type NotReadyError struct {
	Topic string
	// Partition is the task partition that owns the key, or -1 before Run
	// has listed the changelog's partitions.
	Partition int32
	Key       []byte
	// Lag is how many offsets the replica trails the partition's high
	// watermark by (0 when unknown).
	Lag int64
}

func (e *NotReadyError) Error() string {
	if e.Partition < 0 {
		return fmt.Sprintf("view: key %q: %s is not loaded yet (Run has not listed its partitions)", e.Key, e.Topic)
	}
	return fmt.Sprintf("view: key %q: %s[%d] is still catching up (lag %d)", e.Key, e.Topic, e.Partition, e.Lag)
}

// Unwrap returns ErrNotReady.
func (e *NotReadyError) Unwrap() error { return ErrNotReady }

// Codec is how a view decodes the stage's keys and states: the stage's own
// codecs (stage.Codec; stage.String, stage.JSON and the others satisfy
// it), which must be safe for concurrent use. A key codec must be
// canonical, as the stage's is: Encode turns the key a read asks for into
// the bytes the stage's state is kept under.
type Codec[T any] interface {
	Encode(v T) ([]byte, error)
	Decode(b []byte) (T, error)
}

// A View is a read-only replica of one stage's state, typed with the
// stage's key and state codecs. Its methods are safe for concurrent use;
// Run fills it.
type View[K, S any] struct {
	cfg    Config
	topic  string
	keys   Codec[K]
	states Codec[S]

	mu        sync.RWMutex
	parts     map[int32]*replica
	nparts    int32 // the changelog's partition count, once known
	changed   chan struct{}
	running   bool // the replicas are loaded and being followed
	runCalled bool
	stopped   error // what the last Run returned, until another starts
	closed    bool
	stopRun   context.CancelCauseFunc // ends the Run in progress
	runDone   chan struct{}           // closed when the Run in progress returns
	stats     stats
	// inc is the changelog incarnation the replicas mirror (zero before
	// the first Run).
	inc state.Incarnation
	// incarnationEvery is how often Run checks inc against the brokers'
	// (incarnationCheck; tests shorten it before Run).
	incarnationEvery time.Duration
}

// replica is one changelog partition's committed state.
type replica struct {
	kv map[string][]byte
	// f follows the partition into kv (the replica is its Sink): every
	// committed record below f.Applied() is reflected in kv, and f holds
	// the records of transactions whose marker it has not read.
	f *state.Follower
	// hwm is the partition's high watermark as last fetched or listed.
	hwm int64
	// target is the high watermark listed when Run started: the replica
	// is ready once it applied up to it.
	target int64
	ready  bool
	folds  int // fold-state keys in kv

	// store is the replica's file when Config.StateDir is set; only Run's
	// goroutine uses it. restored is what opening it cost; unlock releases
	// the file's lock.
	store    *state.Store
	restored state.Restored
	unlock   func()
	// unsaved are the applied writes not yet in store, last per key.
	unsaved map[string]protocol.Mutation
}

type stats struct {
	records, txns int64
}

// newReplica returns an empty replica that reads its partition from from.
func newReplica(from int64) *replica {
	r := &replica{kv: map[string][]byte{}}
	r.f = state.NewFollower(r, from)
	return r
}

func (r *replica) applied() int64 { return r.f.Applied() }

// Put applies one write of a committed transaction (the replica's side of
// its follower), with the view's lock held: the follower puts a
// transaction's writes only once its marker is read, and the lock is held
// over a whole fetch, so readers see the replica at transaction boundaries
// only.
func (r *replica) Put(m protocol.Mutation) {
	if r.store != nil {
		if r.unsaved == nil {
			r.unsaved = map[string]protocol.Mutation{}
		}
		r.unsaved[m.Key] = m
	}
	_, had := r.kv[m.Key]
	isFold := state.IsFoldKey(m.Key)
	if m.Delete {
		delete(r.kv, m.Key)
		if had && isFold {
			r.folds--
		}
	} else {
		r.kv[m.Key] = m.Value
		if !had && isFold {
			r.folds++
		}
	}
}

// Commit has nothing to do: Put applied each write, and the follower's
// Applied is the replica's offset.
func (r *replica) Commit(context.Context, int64) error { return nil }

// New returns a view of the stage named by cfg, decoding keys and states
// with the stage's codecs. Run fills it. A Config it refuses is an error
// wrapping ErrInvalidConfig, naming each field at fault.
func New[K, S any](cfg Config, keys Codec[K], states Codec[S]) (*View[K, S], error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if keys == nil || states == nil {
		return nil, fmt.Errorf("%w: a key codec and a state codec are required", ErrInvalidConfig)
	}
	cfg.Brokers = slices.Clone(cfg.Brokers)
	cfg.Partitions = slices.Clone(cfg.Partitions)
	return &View[K, S]{
		cfg: cfg, topic: state.ChangelogTopic(cfg.ApplicationID, cfg.Stage),
		keys: keys, states: states, parts: map[int32]*replica{}, changed: make(chan struct{}),
		incarnationEvery: incarnationCheck,
	}, nil
}

func (c *Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...))
	}
	for _, f := range []struct{ field, name string }{{"ApplicationID", c.ApplicationID}, {"Stage", c.Stage}} {
		if err := checkName(f.name); err != nil {
			bad("%s: %v", f.field, err)
		}
	}
	if len(c.Brokers) == 0 {
		bad("no Brokers")
	}
	for i, b := range c.Brokers {
		if strings.TrimSpace(b) == "" {
			bad("Brokers[%d] is empty", i)
		}
	}
	seen := map[int32]bool{}
	for _, p := range c.Partitions {
		switch {
		case p < 0:
			bad("Partitions: %d is negative", p)
		case seen[p]:
			bad("Partitions: %d appears twice", p)
		}
		seen[p] = true
	}
	return errors.Join(errs...)
}

// checkName holds an application or stage name to the stage runtime's
// rule, so that it names a changelog topic and a directory under StateDir.
func checkName(s string) error {
	switch {
	case s == "":
		return errors.New("empty")
	case s == "." || s == "..":
		return fmt.Errorf("%q names a directory", s)
	case len(s) > 200:
		return fmt.Errorf("%q is longer than 200 characters", s)
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%q has character %q; names use letters, digits, '.', '_' and '-'", s, c)
		}
	}
	return nil
}

// Topic returns the changelog topic the view reads.
func (v *View[K, S]) Topic() string { return v.topic }

func (v *View[K, S]) newClient(opts ...kgo.Opt) (*kgo.Client, error) {
	all := append([]kgo.Opt{kgo.SeedBrokers(v.cfg.Brokers...)}, v.cfg.ClientOpts...)
	return kgo.NewClient(append(all, opts...)...)
}

// Run replicates the changelog until ctx ends, and returns ctx's error or
// the error that stopped it (a fetch error, a file the restore refuses), or
// ErrClosed once Close stopped it. Run it on a goroutine of the caller's;
// after it returned it may be run again, and goes on from what the view
// holds — a view without a StateDir from its replicas' offsets, one with a
// StateDir from its files, restored up to the changelog's end — so the
// state it serves never goes back. Two Runs at once are refused, and so is
// a Run after Close.
//
// A changelog deleted, or deleted and created again, while Run runs stops
// it with a *RecreatedError (ErrChangelogRecreated) naming the topic: a
// watcher checks the topic's ID every two seconds, and a failed fetch
// checks it at once. The replicas keep the old topic's state for Get;
// token reads wait until a Run is running again. A later Run on the new
// topic starts over from its start (a view with a StateDir wipes its
// files, as a task does): there, and only there, the state it serves may
// go back, since the stage's own state was recreated too.
func (v *View[K, S]) Run(ctx context.Context) (err error) {
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	v.mu.Lock()
	switch {
	case v.closed:
		v.mu.Unlock()
		return ErrClosed
	case v.runCalled:
		v.mu.Unlock()
		return errors.New("view: Run is already running")
	}
	done := make(chan struct{})
	v.runCalled, v.stopRun, v.runDone, v.stopped = true, stop, done, nil
	v.mu.Unlock()
	// Registered first, so it runs last: Close returns only once every
	// client and file of this Run is released.
	defer func() {
		if errors.Is(context.Cause(ctx), ErrClosed) {
			err = ErrClosed
		}
		v.mu.Lock()
		v.runCalled, v.running, v.stopRun, v.stopped = false, false, nil, err
		v.wake()
		v.mu.Unlock()
		close(done)
	}()
	return v.run(ctx)
}

func (v *View[K, S]) run(ctx context.Context) error {
	admin, err := v.newClient()
	if err != nil {
		return fmt.Errorf("view: %s: %w", v.topic, err)
	}
	defer admin.Close()
	adm := kadm.NewClient(admin)
	inc, err := state.CurrentIncarnation(ctx, adm, v.topic)
	if err != nil {
		return fmt.Errorf("view: %w", err)
	}
	parts, ends, err := v.listPartitions(ctx, adm)
	if err != nil {
		return err
	}
	offs := map[int32]kgo.Offset{}
	v.mu.Lock()
	old := maps.Clone(v.parts)
	if v.inc != (state.Incarnation{}) && v.inc != inc {
		// The replicas mirror a changelog that is gone: its offsets mean
		// nothing in this one. Start over from the new one.
		old = nil
		clear(v.parts)
	}
	v.inc = inc
	v.mu.Unlock()
	reps := map[int32]*replica{}
	defer func() {
		for _, r := range reps {
			if r.store != nil {
				r.store.Close()
				r.store = nil
			}
			if r.unlock != nil {
				r.unlock()
				r.unlock = nil
			}
		}
	}()
	for _, p := range parts {
		r := newReplica(0)
		r.target, r.hwm = ends[p], ends[p]
		if o := old[p]; o != nil && v.cfg.StateDir == "" {
			// Go on from what the replica holds: it is at a commit
			// boundary, and a replay from the start would serve less.
			v.mu.Lock()
			o.f.Rewind()
			o.target, o.hwm = max(o.applied(), ends[p]), max(o.hwm, ends[p])
			v.mu.Unlock()
			r = o
		}
		reps[p] = r
		if v.cfg.StateDir != "" {
			if err := v.openStore(ctx, adm, p, r); err != nil {
				return err
			}
		}
		offs[p] = kgo.NewOffset().At(r.f.Position())
		v.mu.Lock()
		r.ready = r.applied() >= r.target
		v.mu.Unlock()
	}
	v.mu.Lock()
	maps.Copy(v.parts, reps)
	// Token reads consult the replicas from now on: every partition is
	// loaded, at a transaction boundary.
	v.running = true
	v.wake()
	v.mu.Unlock()

	cl, err := v.newClient(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{v.topic: offs}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		// Commit markers are where a transaction's records become the
		// task's state: the view applies a partition's records there.
		kgo.KeepControlRecords(),
		// Never skip silently to another offset: a partition that no
		// longer has the next offset fails the fetch.
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
	)
	if err != nil {
		return fmt.Errorf("view: %s: %w", v.topic, err)
	}
	defer cl.Close()
	// The changelog deleted or recreated under the view: a fetch may just
	// see no records, so a watcher asks the brokers for its topic ID.
	pollCtx, stopPoll := context.WithCancelCause(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watchIncarnation(pollCtx, stopPoll, v.incarnationEvery, adm, v.topic, inc)
	}()
	defer func() { stopPoll(nil); <-watched }()
	for {
		fs := cl.PollFetches(pollCtx)
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := context.Cause(pollCtx); err != nil {
			return err
		}
		var ferr error
		fs.EachError(func(t string, p int32, e error) {
			if ferr == nil && !errors.Is(e, context.Canceled) {
				ferr = fmt.Errorf("view: fetch %s[%d]: %w", t, p, e)
			}
		})
		if ferr != nil {
			var re *RecreatedError
			if err := recreated(ctx, adm, v.topic, inc); errors.As(err, &re) {
				return re
			}
			return ferr
		}
		v.mu.Lock()
		var aerr error
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			if aerr == nil {
				aerr = v.apply(ctx, fp)
			}
		})
		v.wake()
		v.mu.Unlock()
		if aerr != nil {
			return aerr
		}
		if v.cfg.StateDir != "" {
			if err := v.save(ctx, reps); err != nil {
				return err
			}
		}
	}
}

// openStore opens partition p's file and brings it up to date with
// state.Restore — every check a task's store gets — then loads it into r.
func (v *View[K, S]) openStore(ctx context.Context, adm *kadm.Client, p int32, r *replica) error {
	dir := filepath.Join(v.cfg.StateDir, v.cfg.ApplicationID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("view: %w", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-view-%d.db", v.cfg.Stage, p))
	unlock, err := lockFile(path + ".lock")
	if err != nil {
		return fmt.Errorf("view: %s[%d]: %w", v.topic, p, err)
	}
	r.unlock = unlock
	st, err := state.Open(ctx, path)
	if err != nil {
		return fmt.Errorf("view: %s[%d]: %w", v.topic, p, err)
	}
	r.store = st
	res, err := state.Restore(ctx, adm, v.newClient, v.topic, p, st, time.Now)
	if err != nil {
		return fmt.Errorf("view: restore %s[%d] from %s: %w", v.topic, p, st.Path(), err)
	}
	r.restored = res
	es, err := st.Entries()
	if err != nil {
		return fmt.Errorf("view: read %s: %w", st.Path(), err)
	}
	for _, e := range es {
		r.kv[e.Key] = e.Value
		if state.IsFoldKey(e.Key) {
			r.folds++
		}
	}
	// Restore returns only once no transaction is open and everything
	// below the checkpoint is applied: a transaction boundary.
	r.f = state.NewFollower(r, st.Checkpoint())
	r.hwm = max(r.hwm, r.applied())
	r.target = max(r.target, r.applied())
	return nil
}

// save writes what the last fetch applied into each partition's file, off
// the lock readers take.
func (v *View[K, S]) save(ctx context.Context, reps map[int32]*replica) error {
	for p, r := range reps {
		v.mu.Lock()
		muts := make([]protocol.Mutation, 0, len(r.unsaved))
		for _, m := range r.unsaved {
			muts = append(muts, m)
		}
		applied := r.applied()
		changed := len(r.unsaved) > 0 || applied > r.store.Checkpoint()
		clear(r.unsaved)
		v.mu.Unlock()
		if !changed {
			continue
		}
		if err := r.store.Apply(ctx, muts, applied, time.Time{}); err != nil {
			return fmt.Errorf("view: save %s[%d] to %s: %w", v.topic, p, r.store.Path(), err)
		}
	}
	return nil
}

// listPartitions returns the partitions to replicate and their high
// watermarks now.
func (v *View[K, S]) listPartitions(ctx context.Context, adm *kadm.Client) ([]int32, map[int32]int64, error) {
	ends, err := adm.ListEndOffsets(ctx, v.topic)
	if err != nil {
		return nil, nil, fmt.Errorf("view: list offsets of %s: %w", v.topic, err)
	}
	if err := ends.Error(); err != nil {
		return nil, nil, fmt.Errorf("view: list offsets of %s: %w", v.topic, err)
	}
	all := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) { all[o.Partition] = o.Offset })
	if len(all) == 0 {
		return nil, nil, fmt.Errorf("view: changelog %s has no partitions (does the topic exist?)", v.topic)
	}
	parts := v.cfg.Partitions
	if len(parts) == 0 {
		for p := range all {
			parts = append(parts, p)
		}
	}
	parts = slices.Clone(parts)
	slices.Sort(parts)
	for _, p := range parts {
		if _, ok := all[p]; !ok {
			return nil, nil, fmt.Errorf("view: changelog %s has no partition %d (%d partitions)", v.topic, p, len(all))
		}
	}
	v.mu.Lock()
	v.nparts = int32(len(all))
	v.mu.Unlock()
	return parts, all, nil
}

// apply hands one partition's fetched records to its replica's follower,
// which applies each transaction at its commit marker (state.Follower):
// never part of one. Called with v.mu held.
func (v *View[K, S]) apply(ctx context.Context, fp kgo.FetchTopicPartition) error {
	r := v.parts[fp.Partition]
	if r == nil {
		return nil
	}
	r.hwm = max(r.hwm, fp.HighWatermark)
	next := r.f.Position()
	for _, rec := range fp.Records {
		x, err := state.RecordOf(rec)
		if err != nil {
			return fmt.Errorf("view: %w", err)
		}
		r.f.Add(&x)
		next = max(next, rec.Offset+1)
	}
	records, txns := r.f.Applies()
	err := r.f.Flush(ctx, next)
	nr, nt := r.f.Applies()
	v.stats.records += nr - records
	v.stats.txns += nt - txns
	if !r.ready && r.applied() >= r.target {
		r.ready = true
	}
	return err
}

// wake tells every waiting GetAfter that the replicas changed. Called with
// v.mu held.
func (v *View[K, S]) wake() {
	close(v.changed)
	v.changed = make(chan struct{})
}

// owner returns the partition of the task that owns an encoded key: Kafka's
// default partitioner, as the stage's inputs must be partitioned for their
// keys' state to live in one task. It is -1 before Run has listed the
// changelog's partitions. Called with v.mu held.
func (v *View[K, S]) owner(key []byte) int32 {
	switch {
	case v.nparts == 0:
		return -1
	case key == nil:
		return 0
	}
	return kafkahash.Partition(key, v.nparts)
}

// replicates says whether the view replicates partition p.
func (v *View[K, S]) replicates(p int32) bool {
	return len(v.cfg.Partitions) == 0 || slices.Contains(v.cfg.Partitions, p)
}

// Get returns the key's state as the replica holds it now, and whether the
// key has state. Until the owning partition's replica is ready — it has
// applied what the changelog held when Run started, as Status and Ready
// report — Get fails with a *NotReadyError naming the partition (-1
// before Run has listed the changelog's partitions), and a key of a
// partition the view does not replicate fails with ErrNotReplicated.
// Once ready, a replica answers until Close, also after Run returned.
func (v *View[K, S]) Get(key K) (S, bool, error) {
	var zero S
	kb, err := v.keys.Encode(key)
	if err != nil {
		return zero, false, fmt.Errorf("view: encode key: %w", err)
	}
	v.mu.RLock()
	closed := v.closed
	p := v.owner(kb)
	r := v.parts[p]
	replicated := p >= 0 && v.replicates(p)
	var (
		b     []byte
		ok    bool
		ready bool
		lag   int64
	)
	if r != nil {
		ready, lag = r.ready, max(r.hwm-r.applied(), 0)
		b, ok = r.kv[state.FoldKey(kb)]
	}
	v.mu.RUnlock()
	switch {
	case closed:
		return zero, false, ErrClosed
	case p >= 0 && !replicated:
		return zero, false, fmt.Errorf("%w: key %q is owned by %s[%d]", ErrNotReplicated, kb, v.topic, p)
	case r == nil || !ready:
		return zero, false, &NotReadyError{Topic: v.topic, Partition: p, Key: kb, Lag: lag}
	}
	return v.decode(kb, b, ok)
}

func (v *View[K, S]) decode(kb, b []byte, ok bool) (S, bool, error) {
	var zero S
	if !ok {
		return zero, false, nil
	}
	// A codec may decode in place (Bytes returns its input) and the caller
	// owns what it is handed: decode a copy, so no caller can change what
	// the replica holds.
	s, err := v.states.Decode(bytes.Clone(b))
	if err != nil {
		return zero, false, fmt.Errorf("view: decode the state of key %q: %w", kb, err)
	}
	return s, true, nil
}

// All returns every key and its state, partition by partition, as of one
// moment per partition. A key or state its codec cannot decode ends the
// sequence with its error.
func (v *View[K, S]) All() iter.Seq2[Entry[K, S], error] {
	return func(yield func(Entry[K, S], error) bool) {
		v.mu.RLock()
		if v.closed {
			v.mu.RUnlock()
			yield(Entry[K, S]{}, ErrClosed)
			return
		}
		ps := make([]int32, 0, len(v.parts))
		for p := range v.parts {
			ps = append(ps, p)
		}
		v.mu.RUnlock()
		slices.Sort(ps)
		for _, p := range ps {
			type kvp struct {
				k string
				b []byte
			}
			var snap []kvp
			v.mu.RLock()
			r := v.parts[p]
			if r == nil { // closed meanwhile
				v.mu.RUnlock()
				yield(Entry[K, S]{}, ErrClosed)
				return
			}
			for k, b := range r.kv {
				if state.IsFoldKey(k) {
					snap = append(snap, kvp{k, b})
				}
			}
			v.mu.RUnlock()
			slices.SortFunc(snap, func(a, b kvp) int { return cmpString(a.k, b.k) })
			for _, e := range snap {
				var kb []byte
				if rk, isNil, _ := state.RecordKey(e.k); !isNil {
					kb = []byte(rk)
				}
				k, err := v.keys.Decode(kb)
				if err != nil {
					yield(Entry[K, S]{}, fmt.Errorf("view: decode key %q of %s[%d]: %w", kb, v.topic, p, err))
					return
				}
				s, _, err := v.decode(kb, e.b, true)
				if err != nil {
					yield(Entry[K, S]{}, err)
					return
				}
				if !yield(Entry[K, S]{Key: k, State: s, Partition: p}, nil) {
					return
				}
			}
		}
	}
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Entry is one key's state in a scan.
type Entry[K, S any] struct {
	Key       K
	State     S
	Partition int32
}

// Len returns how many keys have state in the replica.
func (v *View[K, S]) Len() int {
	v.mu.RLock()
	defer v.mu.RUnlock()
	n := 0
	for _, r := range v.parts {
		n += r.folds
	}
	return n
}

// PartitionStatus is one replicated partition's progress.
type PartitionStatus struct {
	Partition int32
	// Applied is the changelog offset past the last applied commit.
	Applied int64
	// Lag is how many offsets the replica trails the partition's high
	// watermark by, as last fetched.
	Lag int64
	// Ready: the replica has applied everything committed when Run
	// started.
	Ready bool
	// What opening the partition's file (Config.StateDir) did: whether it
	// was wiped and why (a file of another changelog incarnation, or one
	// too old to trust), and how many changelog records its restore read.
	// Zero without a StateDir.
	Wiped          bool
	WipeReason     string
	RestoreRecords int64
}

// Status returns every replicated partition's progress, by partition.
func (v *View[K, S]) Status() []PartitionStatus {
	v.mu.RLock()
	defer v.mu.RUnlock()
	out := make([]PartitionStatus, 0, len(v.parts))
	for p, r := range v.parts {
		out = append(out, PartitionStatus{Partition: p, Applied: r.applied(), Lag: max(r.hwm-r.applied(), 0), Ready: r.ready,
			Wiped: r.restored.Wiped, WipeReason: r.restored.Reason, RestoreRecords: r.restored.Records})
	}
	slices.SortFunc(out, func(a, b PartitionStatus) int { return int(a.Partition - b.Partition) })
	return out
}

// Ready says whether Run is running and every replica has caught up with
// what the changelog held when it started.
func (v *View[K, S]) Ready() bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	if v.closed || !v.running || len(v.parts) == 0 {
		return false
	}
	for _, r := range v.parts {
		if !r.ready {
			return false
		}
	}
	return true
}

// WaitReady blocks until Ready or ctx ends, or the view is closed
// (ErrClosed).
func (v *View[K, S]) WaitReady(ctx context.Context) error {
	for {
		v.mu.RLock()
		ch, closed := v.changed, v.closed
		v.mu.RUnlock()
		if closed {
			return ErrClosed
		}
		if v.Ready() {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("view: %s not ready: %w", v.topic, ctx.Err())
		case <-ch:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Close stops the view for good: a Run in progress returns ErrClosed (Close
// waits for it, so every client and file of the view is released when
// Close returns), a later Run returns ErrClosed at once, GetAfter calls
// waiting return ErrClosed, and every read after it fails with ErrClosed.
// The replicas' memory is let go. Close is safe to call more than once and
// concurrently with everything else; it returns nil.
//
// To replace a view by another (a new StateDir, other Partitions), build
// the new one, Run it, WaitReady, switch the readers to it, then Close the
// old one.
func (v *View[K, S]) Close() error {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return nil
	}
	v.closed = true
	stop, done := v.stopRun, v.runDone
	v.wake()
	v.mu.Unlock()
	if stop != nil {
		stop(ErrClosed)
		<-done
	}
	v.mu.Lock()
	v.parts = map[int32]*replica{}
	v.mu.Unlock()
	return nil
}
