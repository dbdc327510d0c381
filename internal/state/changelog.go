package state

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Records returns the changelog records for muts, in order: each store key
// as the record key, the value (nil for a delete: a tombstone) as its value.
// The records share one allocation, and keys and values are not copied:
// the key bytes alias the mutation's key string, so they must never be
// written (franz-go only reads them).
func Records(topic string, partition int32, muts []protocol.Mutation) []kgo.Record {
	rs := make([]kgo.Record, len(muts))
	for i, m := range muts {
		r := &rs[i]
		r.Topic, r.Partition, r.Key = topic, partition, keyBytes(m.Key)
		if !m.Delete {
			r.Value = m.Value
			if r.Value == nil {
				r.Value = []byte{}
			}
		}
	}
	return rs
}

// DefaultDeleteRetention is Kafka's default delete.retention.ms: how long
// the log cleaner keeps a tombstone, at least, after it was written. Restore
// assumes it when the changelog topic does not report the setting.
const DefaultDeleteRetention = 24 * time.Hour

// ErrBadRetention: the changelog topic's delete.retention.ms is not a
// non-negative integer, so Restore cannot tell how old a checkpoint may be.
var ErrBadRetention = errors.New("state: changelog has an invalid delete.retention.ms")

// Restored says what a Restore did.
type Restored struct {
	// Wiped: the store's contents were dropped and rebuilt from the
	// changelog's log start; Reason says why.
	Wiped  bool
	Reason string
	// Reincarnated: the wipe was because the store mirrored another
	// incarnation of the changelog (Previous) than the current one
	// (Changelog): the topic was recreated, or this is another cluster.
	Reincarnated        bool
	Previous, Changelog Incarnation
	// Age is the checkpoint's age when Restore began (zero when its time
	// is unknown or it was not needed); Window is the changelog's
	// delete.retention.ms, when it was read.
	Age, Window time.Duration
	// From is the store's checkpoint before the restore, To after it.
	From, To int64
	// Records counts the changelog data records the replay read (control
	// records aside): what the restore cost. A store kept warm by a
	// standby (Tailer) reads only the tail it had not applied.
	Records int64
}

// Why a store is wiped before a replay.
const (
	reasonIncarnation = "the store mirrors another incarnation of the changelog (topic recreated, or another cluster)"
	reasonNoIdentity  = "the store does not record which changelog it mirrors (written by an earlier release)"
	reasonLogStart    = "changelog log start is past the checkpoint"
	reasonUnknown     = "checkpoint time unknown"
	reasonAge         = "checkpoint older than the changelog's delete.retention.ms less the safety margin"
)

// wipeAge is the checkpoint age from which a store is wiped: the
// changelog's delete.retention.ms less a safety margin of a tenth of it, and
// at least a minute. The margin covers what the checkpoint age does not
// measure: the restore's own duration (a tombstone is only safe until it is
// read), skew between this clock and the brokers', and replication lag.
func wipeAge(window time.Duration) time.Duration {
	return window - max(window/10, time.Minute)
}

// Restore brings st up to date with partition p of the changelog topic:
// it replays, read_committed, every record from the checkpoint to the last
// stable offset and advances the checkpoint. It returns only once no
// transaction is open on the partition (last stable offset = high
// watermark) and everything below was applied, so a previous owner's
// in-flight commit is never missed. newClient builds a plain (non-group)
// client from the options it is given; admin lists offsets and describes
// the topic; now is the wall clock.
//
// A replay from the checkpoint is only complete if every tombstone written
// past the checkpoint is still in the log. Compaction removes a tombstone
// once it is delete.retention.ms old, and removes the older values it
// deleted with it, so a store that slept longer than that would keep keys
// that were deleted. Restore therefore first wipes the store and replays
// from the log start when the checkpoint's age (now less CheckpointTime)
// reaches the topic's delete.retention.ms less a safety margin (see
// wipeAge), when that time is unknown, or when the log start is past the
// checkpoint (records after it are gone). This is what Kafka Streams does
// with local state whose checkpoint it cannot trust. A store at checkpoint
// zero with no keys has nothing to wipe.
//
// Offsets only mean something within one incarnation of the changelog
// (see Incarnation). A store that mirrors another one — the topic was
// recreated, or the store came from another cluster — or that does not
// record which one it mirrors is wiped too, and Restored.Reincarnated says
// which. Only a store of the same incarnation whose checkpoint is past the
// changelog's end is refused, with a *ChangelogLostError: the broker lost
// committed records, and a wipe would hide that.
func Restore(ctx context.Context, admin *kadm.Client, newClient func(...kgo.Opt) (*kgo.Client, error), topic string, p int32, st *Store, now func() time.Time) (Restored, error) {
	src := KafkaSource(admin, newClient, topic, p)
	defer src.Close()
	return RestoreFrom(ctx, src, st, now)
}

// RestoreFrom is Restore reading the changelog partition from src, which
// it leaves open.
func RestoreFrom(ctx context.Context, src Source, st *Store, now func() time.Time) (Restored, error) {
	return restoreFrom(ctx, src, st, now, bulkReplayMin)
}

// restoreFrom is RestoreFrom, replaying in bulk into an empty store when at
// least bulkMin changelog offsets are ahead of it (replay.go).
func restoreFrom(ctx context.Context, src Source, st *Store, now func() time.Time, bulkMin int64) (Restored, error) {
	topic, p := src.Topic(), src.Partition()
	if now == nil {
		now = time.Now
	}
	res := Restored{From: st.Checkpoint(), To: st.Checkpoint()}
	giveBack, err := st.replaySpace(ctx)
	if err != nil {
		return res, err
	}
	defer giveBack()
	sink := &replaySink{st: st}
	defer func() {
		// Before giveBack, which needs the connection the replay holds.
		if sink.bulk != nil {
			sink.bulk.close()
		}
	}()
	inc, err := src.Incarnation(ctx)
	if err != nil {
		return res, err
	}
	res.Changelog = inc
	var f *Follower // from the first listing on
	for {
		// Records at or past the end listed below are written after at.
		at := now()
		lso, hwm, start, err := src.Bounds(ctx)
		if err != nil {
			return res, err
		}
		if f == nil {
			if err := wipeIfStale(ctx, src, st, inc, start, hwm, at, &res); err != nil {
				return res, err
			}
			from := st.Checkpoint()
			if from > hwm {
				return res, &ChangelogLostError{Path: st.Path(), Topic: topic, Partition: p, Incarnation: inc, End: hwm, Checkpoint: from}
			}
			if lso-max(from, start) >= bulkMin {
				if empty, err := st.empty(ctx); err != nil {
					return res, err
				} else if empty {
					if sink.bulk, err = st.beginBulk(); err != nil {
						return res, err
					}
				}
			}
			// Compaction or retention removed the head; what survives is
			// the newest value per key, which is all a replay into an
			// empty store needs (a non-empty one was wiped above).
			f = NewFollower(sink, max(from, start))
		}
		pos := f.Position()
		switch {
		case pos > hwm:
			return res, &ChangelogLostError{Path: st.Path(), Topic: topic, Partition: p, Incarnation: inc, End: hwm, Checkpoint: pos}
		case pos < start:
			// Retention moved the log start past the replay while it ran:
			// the records in between are gone. The next attempt finds the
			// start past the checkpoint and wipes.
			return res, fmt.Errorf("state: restore %s[%d]: log start %d passed the replay at %d; retry", topic, p, start, pos)
		case pos >= lso && lso == hwm:
			// Caught up: nothing past pos existed at at, and no
			// transaction is open, so every one the replay read a record
			// of was decided below pos and is applied.
			if f.Holding() {
				return res, fmt.Errorf("state: restore %s[%d]: records below %d have no transaction marker below the last stable offset", topic, p, pos)
			}
			// The offsets listed were the incarnation's read at the start
			// only if it is still the current one.
			if cur, err := src.Incarnation(ctx); err != nil {
				return res, err
			} else if cur != inc {
				return res, fmt.Errorf("%w: %s was %s, now %s", ErrRecreatedDuringRestore, topic, inc, cur)
			}
			if err := sink.finish(ctx, pos, at); err != nil {
				return res, err
			}
			res.To = st.Checkpoint()
			return res, nil
		case pos >= lso:
			// A transaction is open on the partition: wait for its end.
			if err := src.Await(ctx); err != nil {
				return res, err
			}
			continue
		}
		for f.Position() < lso {
			recs, next, _, err := src.Fetch(ctx, f.Position())
			if err != nil {
				return res, fmt.Errorf("state: restore %s[%d]: %w", topic, p, err)
			}
			for _, r := range recs {
				if !r.Control && r.Offset >= f.Position() {
					res.Records++
				}
			}
			// Applied at commit markers: these records were written at
			// any time before now, and the checkpoint keeps its time.
			if err := f.Read(ctx, recs, next); err != nil {
				return res, fmt.Errorf("state: restore %s[%d]: %w", topic, p, err)
			}
		}
	}
}

// replaySink is a restore's Sink. It writes the committed transactions it
// is given restoreBatchKeys keys (or about restoreBatchBytes) at a time,
// sorted, in one SQLite transaction with the checkpoint of the read that
// completed the batch: a batch's rows land on neighbouring B-tree pages,
// where rows in changelog order land all over the file (a step's writes
// are sorted, the steps' keys are not) and cost a page cache miss each.
// Into an empty store with much to replay it writes sorted runs instead,
// merged into the table at the end (bulk, replay.go). What it holds staged
// is written by finish; a restore cut short restarts from the store's
// checkpoint, which only a write moves.
type replaySink struct {
	st    *Store
	bulk  *bulkReplay // nil: batches go to the table
	muts  []protocol.Mutation
	bytes int
}

func (s *replaySink) Put(m protocol.Mutation) {
	s.muts = append(s.muts, m)
	s.bytes += len(m.Key) + len(m.Value)
}

// Commit writes the staged batch once it is full.
func (s *replaySink) Commit(ctx context.Context, next int64) error {
	if len(s.muts) < restoreBatchKeys && s.bytes < restoreBatchBytes {
		return nil
	}
	return s.write(ctx, next)
}

func (s *replaySink) write(ctx context.Context, next int64) error {
	var err error
	if s.bulk != nil {
		// The store's checkpoint moves when finish builds it.
		err = s.bulk.append(s.muts)
	} else {
		// The zero time keeps the recorded one: these records were
		// written at any time before now.
		err = s.st.Apply(ctx, lastPerKey(s.muts), next, time.Time{})
	}
	if err != nil {
		return err
	}
	clear(s.muts) // keep no fetch buffer alive
	s.muts, s.bytes = s.muts[:0], 0
	return nil
}

// finish writes what is staged and the checkpoint pos, at time at.
func (s *replaySink) finish(ctx context.Context, pos int64, at time.Time) error {
	if s.bulk == nil {
		return s.st.Apply(ctx, lastPerKey(s.muts), pos, at)
	}
	if len(s.muts) > 0 {
		if err := s.bulk.append(s.muts); err != nil {
			return err
		}
	}
	return s.bulk.finish(ctx, pos, at)
}

// wipeIfStale resets st when its checkpoint cannot be trusted (see Restore),
// recording the decision in res; inc is the changelog's incarnation now,
// start and end its partition's log start and high watermark.
func wipeIfStale(ctx context.Context, src Source, st *Store, inc Incarnation, start, end int64, now time.Time, res *Restored) error {
	topic, p := src.Topic(), src.Partition()
	cp := st.Checkpoint()
	prev, known := st.Mirrors()
	res.Previous = prev
	fresh := false
	if cp == 0 {
		empty, err := st.empty(ctx)
		if err != nil {
			return fmt.Errorf("state: restore %s[%d]: %w", topic, p, err)
		}
		fresh = empty
	}
	switch t := st.CheckpointTime(); {
	case fresh:
		// Nothing to wipe; only the incarnation to record, below.
	case !known:
		res.Reason = reasonNoIdentity
	case prev != inc:
		res.Reason, res.Reincarnated = reasonIncarnation, true
	case cp > end:
		// The same changelog lost records: Restore refuses the store,
		// and a wipe would destroy the evidence.
		return nil
	case start > cp:
		res.Reason = reasonLogStart
	case t.IsZero():
		res.Reason = reasonUnknown
	default:
		window, err := src.DeleteRetention(ctx)
		if err != nil {
			return err
		}
		res.Age, res.Window = now.Sub(t), window
		if res.Age >= wipeAge(window) {
			res.Reason = reasonAge
		}
	}
	if res.Reason == "" && (!fresh || (known && prev == inc)) {
		return nil
	}
	if err := st.Reset(ctx, inc); err != nil {
		return fmt.Errorf("state: restore %s[%d]: wipe %s: %w", topic, p, st.Path(), err)
	}
	res.Wiped = res.Reason != ""
	return nil
}

// deleteRetention reads the topic's delete.retention.ms, or Kafka's default
// when the topic does not report it.
func deleteRetention(ctx context.Context, admin *kadm.Client, topic string) (time.Duration, error) {
	rcs, err := admin.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("state: describe changelog %s: %w", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return 0, fmt.Errorf("state: describe changelog %s: %w", topic, err)
	}
	for _, c := range rc.Configs {
		if c.Key != "delete.retention.ms" || c.Value == nil {
			continue
		}
		ms, err := strconv.ParseInt(*c.Value, 10, 64)
		if err != nil || ms < 0 {
			return 0, fmt.Errorf("%w: %s has %q", ErrBadRetention, topic, *c.Value)
		}
		return time.Duration(ms) * time.Millisecond, nil
	}
	return DefaultDeleteRetention, nil
}

// Restore writes at most restoreBatchKeys changelog records, or about
// restoreBatchBytes of their keys and values, in one SQLite transaction.
const (
	restoreBatchKeys  = 1 << 16
	restoreBatchBytes = 8 << 20
)

// lastPerKey sorts ms by key, in place, and returns it with only the last
// mutation of each key: SQLite writes rows in key order to neighbouring
// pages of its B-tree. The sort keeps one key's writes in their order.
func lastPerKey(ms []protocol.Mutation) []protocol.Mutation {
	protocol.SortMutations(ms)
	out := ms[:0]
	for i, m := range ms {
		if i+1 < len(ms) && ms[i+1].Key == m.Key {
			continue // a later write of the key follows
		}
		out = append(out, m)
	}
	clear(ms[len(out):]) // keep no record alive past its write
	return out
}

func bounds(ctx context.Context, admin *kadm.Client, topic string, p int32) (lso, hwm, start int64, err error) {
	get := func(what string, f func(context.Context, ...string) (kadm.ListedOffsets, error)) (int64, error) {
		l, err := f(ctx, topic)
		if err == nil {
			err = l.Error()
		}
		if err != nil {
			return 0, fmt.Errorf("state: list %s offsets of %s: %w", what, topic, err)
		}
		o, ok := l.Lookup(topic, p)
		if !ok {
			return 0, fmt.Errorf("state: changelog %s has no partition %d", topic, p)
		}
		return o.Offset, nil
	}
	if lso, err = get("committed", admin.ListCommittedOffsets); err != nil {
		return
	}
	if hwm, err = get("end", admin.ListEndOffsets); err != nil {
		return
	}
	start, err = get("start", admin.ListStartOffsets)
	return
}
