package stage

// Scope warnings: a delivered record whose cause another task consumes.
//
// A task (stage, p) consumes partition p of every source topic, so it
// orders a record only after the causes it claims on partition p. A cause
// on partition q ≠ p of the same source topics is consumed by task q and
// is not waited for: that is the protocol's scope, and for a producer that
// merely read several partitions it is harmless. It becomes a silent loss
// of order when related records were meant to be co-partitioned and are
// not — a producer whose partitioner is not Kafka's murmur2, or related
// records keyed differently. The first cause leaves a trace the task can
// see: the delivered record's key does not hash to the partition it is on.
// So a delivery is counted and warned about when it claims an offset on
// another partition of one of the stage's source topics and its key,
// hashed with murmur2, belongs on another partition than the one it
// arrived on.

import (
	"cmp"
	"log/slog"
	"slices"
	"strconv"
	"sync"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
)

// scopePair is one (stage, delivered topic, claimed topic) series.
type scopePair struct {
	stage, topic, claimed string
}

// scopeWarnings counts cross-task claims per series in committed steps and
// remembers which series were warned about. The step goroutine counts and
// commits or drops the open step's counts; the collector reads the
// committed ones (snapshot). mu guards every field. The zero value is
// ready.
type scopeWarnings struct {
	mu        sync.Mutex
	committed map[scopePair]uint64
	pending   map[scopePair]uint64 // the open step's
	warned    map[scopePair]bool
}

// checkScope looks at one delivery of task t from source topic b. It is
// called for every delivery, so the common case — no claim on another
// partition of a source, or a record where murmur2 puts it — allocates
// nothing.
func (t *task) checkScope(b *binding, d *protocol.Delivery) {
	if d.Key == nil || d.Stamp.Tagged || b.tick {
		// A nil key has no murmur2 home. A stage's sends (tagged) go where
		// murmur2 puts them, except its ticks, which stay on the task's
		// partition by design: neither is a producer's mistake.
		return
	}
	if b != t.scopeSource.b { // a task's deliveries come in runs from one source
		meta := t.env.topics[b.topic]
		t.scopeSource.b, t.scopeSource.partitions = b, meta.partitions
	}
	parts := t.scopeSource.partitions
	if parts <= 0 {
		return
	}
	home := partitionFor(d.Key, false, parts, t.partition)
	if home == t.partition {
		return
	}
	// One count per claimed source topic; entries come ordered by topic,
	// so a topic's entries are adjacent.
	var last headers.TopicID
	for e := range d.Stamp.Clock.OffsetEntries() {
		if e.Channel.Partition == t.partition || (e.Channel.Topic == last && !last.IsZero()) {
			continue
		}
		cb := t.byID[e.Channel.Topic]
		if cb == nil {
			continue // not a source of this stage: outside its scope by design
		}
		last = e.Channel.Topic
		t.env.scope.count(t.env.log, scopePair{stage: t.st.name, topic: b.topic, claimed: cb.topic},
			headers.Coordinate{Channel: headers.Channel{Topic: d.Topic, Partition: t.partition}, Offset: d.Offset},
			e.Channel.Partition, e.Offset, home)
	}
}

func (s *scopeWarnings) count(log *slog.Logger, p scopePair, at headers.Coordinate, claimedPartition int32, claimedOffset int64, home int32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pending == nil {
		s.pending = make(map[scopePair]uint64)
	}
	s.pending[p]++
	if s.warned[p] {
		return
	}
	if s.warned == nil {
		s.warned = make(map[scopePair]bool)
	}
	s.warned[p] = true
	delivered := p.topic + "/" + strconv.Itoa(int(at.Partition)) + "@" + strconv.FormatInt(at.Offset, 10)
	claimed := p.claimed + "/" + strconv.Itoa(int(claimedPartition)) + "@" + strconv.FormatInt(claimedOffset, 10)
	log.Warn("stage: a delivered record claims a cause that another task consumes; causal order across them is not enforced",
		"stage", p.stage, "delivered", delivered, "claims", claimed,
		"murmur2_partition", home,
		"likely_cause", "the producer of "+p.topic+" does not partition with murmur2 (Kafka's default), or related records are keyed differently",
		"metric", metricScopeCrossings)
}

// commitStep adds the open step's counts to the committed ones; abortStep
// drops them, since the redone step counts again.
func (s *scopeWarnings) commitStep() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) == 0 {
		return
	}
	if s.committed == nil {
		s.committed = make(map[scopePair]uint64)
	}
	for p, n := range s.pending {
		s.committed[p] += n
	}
	clear(s.pending)
}

func (s *scopeWarnings) abortStep() {
	s.mu.Lock()
	clear(s.pending)
	s.mu.Unlock()
}

// snapshot returns the committed counts, ordered by series.
func (s *scopeWarnings) snapshot() []scopeCount {
	s.mu.Lock()
	out := make([]scopeCount, 0, len(s.committed))
	for p, n := range s.committed {
		out = append(out, scopeCount{p, n})
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b scopeCount) int {
		switch {
		case a.stage != b.stage:
			return cmp.Compare(a.stage, b.stage)
		case a.topic != b.topic:
			return cmp.Compare(a.topic, b.topic)
		}
		return cmp.Compare(a.claimed, b.claimed)
	})
	return out
}

type scopeCount struct {
	scopePair
	n uint64
}
