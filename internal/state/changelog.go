package state

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrChangelogBehind: the store's checkpoint is past the changelog's end,
// so the changelog was deleted or recreated under the store. Replaying it
// would silently lose state; the task stops instead.
var ErrChangelogBehind = errors.New("state: changelog ends before the store's checkpoint")

// Record returns the changelog record for one mutation: the store key as
// the record key, the value (nil for a delete: a tombstone) as its value.
func Record(topic string, partition int32, m protocol.Mutation) *kgo.Record {
	r := &kgo.Record{Topic: topic, Partition: partition, Key: []byte(m.Key)}
	if !m.Delete {
		r.Value = m.Value
		if r.Value == nil {
			r.Value = []byte{}
		}
	}
	return r
}

// Restore brings st up to date with partition p of the changelog topic:
// it replays, read_committed, every record from the checkpoint to the last
// stable offset and advances the checkpoint. It returns only once no
// transaction is open on the partition (last stable offset = high
// watermark) and everything below was applied, so a previous owner's
// in-flight commit is never missed. newClient builds a plain (non-group)
// client from the options it is given; admin lists offsets.
func Restore(ctx context.Context, admin *kadm.Client, newClient func(...kgo.Opt) (*kgo.Client, error), topic string, p int32, st *Store) error {
	var cl *kgo.Client
	defer func() {
		if cl != nil {
			cl.Close()
		}
	}()
	pos := st.Checkpoint()
	for {
		lso, hwm, start, err := bounds(ctx, admin, topic, p)
		if err != nil {
			return err
		}
		if pos > hwm {
			return fmt.Errorf("%w: %s[%d] ends at %d, checkpoint %d (%s)", ErrChangelogBehind, topic, p, hwm, pos, st.Path())
		}
		if pos < start {
			// Compaction or retention removed the head; what survives is
			// the newest value per key, which is all a replay needs.
			pos = start
		}
		if pos >= lso && lso == hwm {
			if pos > st.Checkpoint() {
				return st.Apply(ctx, nil, pos)
			}
			return nil
		}
		if pos >= lso {
			// A transaction is open on the partition: wait for its end.
			if err := sleep(ctx, 50*time.Millisecond); err != nil {
				return err
			}
			continue
		}
		if cl == nil {
			cl, err = newClient(
				kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {p: kgo.NewOffset().At(pos)}}),
				kgo.FetchIsolationLevel(kgo.ReadCommitted()),
				kgo.KeepControlRecords(),
			)
			if err != nil {
				return fmt.Errorf("state: restore %s[%d]: %w", topic, p, err)
			}
		}
		for pos < lso {
			pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			fs := cl.PollFetches(pctx)
			cancel()
			if err := ctx.Err(); err != nil {
				return err
			}
			var ferr error
			fs.EachError(func(t string, part int32, err error) {
				if !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) && ferr == nil {
					ferr = fmt.Errorf("state: restore %s[%d]: fetch: %w", t, part, err)
				}
			})
			if ferr != nil {
				return ferr
			}
			var muts []protocol.Mutation
			next := pos
			fs.EachRecord(func(r *kgo.Record) {
				if r.Offset < next {
					return
				}
				next = r.Offset + 1
				if r.Attrs.IsControl() {
					return
				}
				muts = append(muts, protocol.Mutation{Key: string(r.Key), Value: r.Value, Delete: r.Value == nil})
			})
			if next > pos {
				if err := st.Apply(ctx, lastPerKey(muts), next); err != nil {
					return err
				}
				pos = next
			}
		}
	}
}

// lastPerKey keeps the last mutation of each key, in first-seen order of the
// surviving writes (order between distinct keys does not matter).
func lastPerKey(ms []protocol.Mutation) []protocol.Mutation {
	idx := make(map[string]int, len(ms))
	out := ms[:0:0]
	for _, m := range ms {
		if i, ok := idx[m.Key]; ok {
			out[i] = m
			continue
		}
		idx[m.Key] = len(out)
		out = append(out, m)
	}
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

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
