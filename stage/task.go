package stage

// A task, one (stage, partition): building its causal node, feeding it
// records, running user logic on its deliveries, sending stamped
// emissions, and writing its store after a commit.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"
	"unsafe"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/state"
	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kgo"
)

// task is one (stage, partition): a causal node over partition p of each
// source, fed by the steps, running user logic on its deliveries. It is
// composed of parts with one job each: its store (the file, the step's
// writes and the unwritten ones: taskstore.go), its stamped sends
// (tasksends.go) and its schedule of ticks and sweeps (tasktimers.go).
//
// The session loop owns a task and reaches it only through the task
// manager (taskmanager.go); while a restore's job runs, the job owns the
// task's store file, and the task takes part in no step. Produce promises
// write only what the parts name as theirs, under the env's send lock.
type task struct {
	env       *taskEnv
	st        *Stage
	id        taskID
	partition int32
	// held: the epochs of the partitions the task consumes, as held when
	// it was opened; it runs on only while they are unchanged
	// (taskManager.reconcile).
	held map[topicPartition]uint64

	inputs    []headers.Channel // per source, in the stage's declaration order; the tick topic last
	sinks     []headers.TopicID
	byID      map[headers.TopicID]*binding
	tickTopic string // the stage's tick topic, "" when it does not tick

	node   *protocol.Node // nil: rebuild at the next step
	store  taskStore
	sends  taskSends
	timers taskTimers

	lastSource struct { // the last delivery's source binding (deliver)
		id headers.TopicID
		b  *binding
	}
	scopeSource struct { // the last source checkScope looked up
		b          *binding
		partitions int32 // 0: unknown topic
	}
	msg  rawMessage // the delivery being processed, reused
	fold foldState  // its state view, reused

	// Decoders of the step's records ahead of delivery, per source topic
	// (nil: the source is not decoded ahead), and where the feed stands in
	// the current window (decodeahead.go).
	ahead   map[string]aheadDecoder
	feeding aheadCursor

	foldKeys foldKeyCache
	readKeys []string // prefetch's scratch (prefetch.go)

	// Owned by the session loop; they survive the node's rebuilds and go
	// when the task leaves.
	counts taskCounts                     // committed-step counts (snapshot.go)
	heads  map[headers.Channel]*headTrack // holds.go

	// startOver: the store was wiped because its changelog was recreated;
	// inputs it has no position on resume at the group's (positions.go).
	startOver bool

	// begin: per input, where the node's last build started it; -1 none
	// (txnend.go).
	begin []int64

	tr *taskTracer // nil: tracing off (tracing.go)
}

// newTask makes the task id of stage st over its opened store.
func newTask(env *taskEnv, st *Stage, id taskID, kv *state.Store, topo *topology) *task {
	t := &task{
		env: env, st: st, id: id, partition: id.partition,
		byID:   make(map[headers.TopicID]*binding),
		store:  newTaskStore(env, st.name, id.partition, ChangelogTopic(env.appID, st.name), kv),
		sends:  taskSends{env: env, st: st, partition: id.partition},
		timers: taskTimers{tick: st.tick, every: env.truncateEvery},
	}
	for i := range st.sources {
		b := &st.sources[i]
		m := topo.topics[b.topic]
		t.inputs = append(t.inputs, headers.Channel{Topic: m.id, Partition: id.partition})
		t.byID[m.id] = b
	}
	for _, k := range st.sinks {
		t.sinks = append(t.sinks, topo.topics[k.topicName()].id)
	}
	if b := topo.tickBind[id.stage]; b != nil {
		// The tick topic is an input and a sink of its own (ticks.go).
		t.tickTopic = b.topic
		m := topo.topics[b.topic]
		t.inputs = append(t.inputs, headers.Channel{Topic: m.id, Partition: id.partition})
		t.byID[m.id] = b
		t.sinks = append(t.sinks, m.id)
	}
	if tr := env.tracing; tr != nil {
		t.tr = tr.forTask(st.name, id.partition, topo.idName)
	}
	return t
}

// reset drops the node and the step's writes; the next step rebuilds the
// node from the committed store.
func (t *task) reset() {
	t.node = nil
	t.stepAborted()
	t.store.dropStep()
	t.sends.clear()
	t.sends.release()
}

// nodeBuilt records that the node was (re)built: the first build schedules
// the first tick and sweep, and every build counts from zero again.
func (t *task) nodeBuilt() {
	t.timers.started(t.env.clock())
	t.counts.rebuilt()
}

// stepCommitted folds a committed step into the task's counts and
// schedules.
func (t *task) stepCommitted() {
	if t.tr != nil {
		t.tr.stepEnded(true)
	}
	if t.node != nil {
		t.counts.committed(t.node.Counters())
	}
	if t.timers.committed() {
		t.counts.ticks++
	}
	t.sends.release()
}

// stepAborted forgets the open step's tick and sweep, which the rebuilt
// node redoes, and its counts.
func (t *task) stepAborted() {
	if t.tr != nil {
		t.tr.stepEnded(false)
	}
	t.timers.aborted()
	t.counts.rebuilt()
}

func (t *task) close() {
	t.reset()
	t.store.close()
}

// initErr classifies a node init failure: state this build cannot use
// stops the application; anything else (a broker answer) aborts the step,
// which is retried.
func (t *task) initErr(err error) error {
	for _, e := range []error{protocol.ErrUnknownStateFormat, protocol.ErrCorruptState, protocol.ErrHeldOnRemovedInput, protocol.ErrInvalidConfig, protocol.ErrSinkMissing} {
		if errors.Is(err, e) {
			return &fatal{t.stepErr("", -1, err)}
		}
	}
	return fmt.Errorf("stage %q partition %d: init: %w", t.st.name, t.partition, err)
}

// build makes a node from committed state (host duty H5) and processes
// what its first Release delivers. Init writes go to the step's batch.
func (t *task) build(ctx context.Context, p producer, starts, logStarts map[string]map[int32]int64) error {
	// The committed state: the file under the committed steps' writes not
	// yet in it (taskstore.go).
	batch := t.store.beginStep()
	n, err := protocol.New(ctx, protocol.Config{
		ApplicationID: t.env.appID,
		Stage:         t.st.name,
		Partition:     t.partition,
		Inputs:        t.inputs,
		Sinks:         t.sinks,
		Store:         batch,
		Offsets:       t.env.offsets,
	})
	if err != nil {
		return t.initErr(err)
	}
	if rw := t.ownStarts(n, starts, logStarts); rw != nil {
		return rw // positions.go
	}
	t.node = n
	t.recordBegin(starts)
	t.nodeBuilt()
	t.sweep(ctx, t.env.clock()) // a task's stamps shrink as soon as it starts
	ds, err := n.Release()
	if err != nil {
		return t.stepErr("", -1, err)
	}
	if err := t.deliver(ctx, p, ds); err != nil {
		return err
	}
	if t.tr != nil {
		t.tr.settled(n)
	}
	// A new incarnation knows nothing of the markers below where it starts
	// consuming; report the start so claims on them resolve (H5).
	for i, b := range t.st.sources {
		pos, ok := starts[b.topic][t.partition]
		if !ok || pos <= 0 {
			continue
		}
		ds, err := n.PositionAdvance(t.inputs[i], pos)
		if err != nil {
			return t.stepErr(b.topic, pos, err)
		}
		if err := t.deliver(ctx, p, ds); err != nil {
			return err
		}
		if t.tr != nil {
			t.tr.settled(n)
		}
	}
	return t.tickToStart(ctx, p, starts)
}

func (t *task) stepErr(topic string, offset int64, err error) error {
	return &StepError{Stage: t.st.name, Topic: topic, Partition: t.partition, Offset: offset, Err: err}
}

// feed hands one partition's fetched records to the node in offset order,
// then reports the consumer position past the last of them (host duties H1,
// H2). Control records only move the position: they are never delivered.
func (t *task) feed(ctx context.Context, p producer, topic string, recs []*kgo.Record) error {
	ch := headers.Channel{Topic: t.env.topics[topic].id, Partition: t.partition}
	var dec aheadDecoder // recs decoded ahead: the same records
	if d := t.ahead[topic]; d != nil {
		if w := d.window(); len(w) == len(recs) && len(w) > 0 && w[0] == recs[0] {
			dec = d
		}
	}
	defer func() { t.feeding = aheadCursor{} }()
	if err := t.prefetch(ctx, ch.Topic, recs); err != nil {
		return t.stepErr(topic, recs[0].Offset, err)
	}
	last := int64(-1)
	for j, r := range recs {
		last = r.Offset
		if r.Attrs.IsControl() {
			continue
		}
		if dec != nil {
			t.feeding = aheadCursor{dec: dec, topic: ch.Topic, at: j, offset: r.Offset}
		}
		rec := protocol.Record{
			Coordinate: headers.Coordinate{Channel: ch, Offset: r.Offset},
			Timestamp:  r.Timestamp.UnixMilli(),
			Key:        r.Key,
			Value:      r.Value,
			Headers:    asHeaders(r.Headers),
		}
		if t.tr != nil {
			t.tr.fetch(t.node, r, rec.Coordinate)
		}
		ds, err := t.node.OnRecord(&rec)
		if err != nil {
			return t.stepErr(topic, r.Offset, err)
		}
		if err := t.deliver(ctx, p, ds); err != nil {
			return err
		}
		if t.tr != nil {
			t.tr.fed(t.node)
		}
	}
	if last >= 0 {
		ds, err := t.node.PositionAdvance(ch, last+1)
		if err != nil {
			return t.stepErr(topic, last+1, err)
		}
		if err := t.deliver(ctx, p, ds); err != nil {
			return err
		}
		if t.tr != nil {
			t.tr.settled(t.node)
		}
	}
	return nil
}

// aheadFor returns the task's decoder of topic's records ahead of their
// delivery, nil when the source has none.
func (t *task) aheadFor(topic string) aheadDecoder {
	if d, ok := t.ahead[topic]; ok {
		return d
	}
	var d aheadDecoder
	if b := t.byID[t.env.topics[topic].id]; b != nil && b.newAhead != nil {
		d = b.newAhead()
	}
	if t.ahead == nil {
		t.ahead = make(map[string]aheadDecoder)
	}
	t.ahead[topic] = d
	return d
}

// asHeaders views franz-go's headers as headers.Header without copying:
// the two struct types are identical (the conversion below would not
// compile otherwise), so their slices share a layout.
func asHeaders(hs []kgo.RecordHeader) []headers.Header {
	if len(hs) == 0 {
		return nil
	}
	_ = headers.Header(kgo.RecordHeader{})
	return unsafe.Slice((*headers.Header)(unsafe.Pointer(unsafe.SliceData(hs))), len(hs))
}

// deliver runs user logic on each delivery, in order, and sends its
// emissions. The deliveries slice belongs to the node until its next call
// that returns deliveries; PrepareSend is not such a call.
func (t *task) deliver(ctx context.Context, p producer, ds []protocol.Delivery) error {
	for i := range ds {
		d := &ds[i]
		b := t.lastSource.b
		if b == nil || d.Topic != t.lastSource.id { // deliveries come in runs from one source
			b = t.byID[d.Topic]
			t.lastSource.id, t.lastSource.b = d.Topic, b
		}
		if b == nil {
			return t.stepErr("", d.Offset, fmt.Errorf("delivery on undeclared channel %s", d.Channel))
		}
		t.checkScope(b, d)
		if t.tr != nil {
			t.tr.delivering(d, b.topic)
		}
		m := &t.msg
		*m = rawMessage{
			topic: b.topic, partition: d.Partition, offset: d.Offset, coord: d.Coordinate,
			ts: time.UnixMilli(d.Timestamp), key: d.Key, value: d.Value, headers: d.Headers,
		}
		if t.tr != nil {
			m.ctx = t.tr.cur
		}
		if i := t.feeding.locate(d.Topic, d.Offset); i >= 0 {
			m.ahead, m.aheadAt = t.feeding.dec, i
		}
		var io stateIO
		if b.fold {
			key := t.foldKeys.of(d.Key)
			if b.tick {
				key = state.TickSlot
			}
			t.fold = foldState{batch: t.store.batch, key: key}
			io = &t.fold
		}
		es, err := b.invoke(m, io)
		if err != nil {
			return t.stepErr(b.topic, d.Offset, err)
		}
		for _, e := range es {
			if err := t.sends.emit(ctx, p, t.node, m, e, t.tr); err != nil {
				return t.stepErr(b.topic, d.Offset, err)
			}
		}
		if t.tr != nil {
			t.tr.processed()
		}
	}
	return nil
}

// flush reports the step's acknowledged sends to the node (awaitSends has
// waited for them), writes the node's changed state into the batch and
// produces the step's mutations to the changelog, last write per key.
func (t *task) flush(ctx context.Context, p producer) error {
	if t.node == nil {
		return nil
	}
	if err := t.sends.report(t.node); err != nil {
		return err
	}
	if err := t.node.Flush(); err != nil {
		return t.stepErr("", -1, err)
	}
	t.store.sendChangelog(ctx, p)
	return nil
}

// checkpointRefresh is how stale a task's checkpoint time may grow while
// its steps write nothing before a commit refreshes it anyway. An idle task
// that owned its partition through committed steps has missed nothing, and
// a fresh time spares it a needless wipe and full restore at its next start
// (state.Restore).
const checkpointRefresh = time.Minute

// foldKeyCache remembers the fold keys of recent record keys: a stream
// touches the same keys again and again, and each new key string would be
// an allocation per record. It holds at most foldKeyCacheKeys keys and
// foldKeyCacheBytes bytes of them; when full it starts over, keeping its
// map's memory.
type foldKeyCache struct {
	m     map[string]string // record key (aliasing the fold key) → fold key (state.FoldKey)
	bytes int
}

const (
	foldKeyCacheKeys  = 32 << 10
	foldKeyCacheBytes = 1 << 20
)

func (c *foldKeyCache) of(key []byte) string {
	if key == nil {
		return state.FoldKey(nil)
	}
	if k, ok := c.m[string(key)]; ok {
		return k
	}
	k := state.FoldKey(key)
	if len(k) > foldKeyCacheBytes {
		return k
	}
	if c.m == nil {
		c.m = make(map[string]string)
	}
	if len(c.m) >= foldKeyCacheKeys || c.bytes+len(k) > foldKeyCacheBytes {
		clear(c.m)
		c.bytes = 0
	}
	rk, _, _ := state.RecordKey(k) // the record key, aliasing k
	c.m[rk] = k
	c.bytes += len(k)
	return k
}

type foldState struct {
	batch *protocol.Batch
	key   string
}

// load returns the key's state as bytes the fold owns: its codec may decode
// into a value that aliases them and update it in place. A write of this
// step is copied here (the batch keeps it for the changelog and the
// commit, and the step's emissions may share it); committed state comes
// copied from below.
func (f *foldState) load() ([]byte, bool, error) {
	if m, ok := f.batch.Staged(f.key); ok {
		if m.Delete {
			return nil, false, nil
		}
		return bytes.Clone(m.Value), true, nil
	}
	return f.batch.Base().Get(f.key) // Get would look the key up again
}

func (f *foldState) store(b []byte) error { return f.batch.Put(f.key, b) }
func (f *foldState) del() error           { return f.batch.Delete(f.key) }
