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

// Tailing: a standby keeps a warm copy of a task's store by following the
// task's changelog partition while another instance runs the task. When
// the task moves to it, Restore resumes from the copy's checkpoint and
// replays only the records the copy has not applied.

// ErrLogStartPassed: retention moved the changelog's log start past the
// records a tailed store has applied, so the records in between are gone.
// The next Restore finds the start past the checkpoint and wipes.
var ErrLogStartPassed = errors.New("state: changelog log start passed the store's checkpoint")

// TailProgress is what a Tailer reports after every poll.
type TailProgress struct {
	// Applied is the store's checkpoint: every committed changelog record
	// below it is applied.
	Applied int64
	// Lag is how many offsets the store trails the partition's high
	// watermark by, as of the last fetch or offset listing.
	Lag int64
}

// Tailer follows one changelog partition into a store. Its fields are
// read once, by Run.
type Tailer struct {
	Admin *kadm.Client
	// NewClient builds a plain (non-group) client from the options it is
	// given, as for Restore.
	NewClient func(...kgo.Opt) (*kgo.Client, error)
	Topic     string
	Partition int32
	Store     *Store
	// Now is the wall clock (default time.Now).
	Now func() time.Time
	// Check is how often the tailer lists the partition's offsets and the
	// changelog's identity: to notice a recreated topic or a log start
	// that passed it, and to refresh the checkpoint time, which keeps a
	// copy that is current from being wiped as too old at activation
	// (default one minute).
	Check time.Duration
	// Progress, when set, runs on Run's goroutine after the first catch-up
	// and after every poll, whether or not it applied anything. It may
	// block; Run waits for it.
	Progress func(context.Context, TailProgress)
}

// Run brings the store up to date with Restore — with every check Restore
// makes: a store of another incarnation, or one whose checkpoint cannot be
// trusted, is wiped; a changelog that lost committed records is refused —
// and then applies, read_committed, every committed changelog record as it
// is written, until ctx ends. It returns the first Restore's result and
// ctx's error, or the error that stopped it: a fetch error, a log start
// past the checkpoint (ErrLogStartPassed), a recreated changelog
// (ErrRecreatedDuringRestore) or one that lost records
// (*ChangelogLostError). Calling Run again recovers from any of them the
// way Restore does.
//
// A store that Run applied to is, at any moment, the changelog's state at
// some offset of it; Restore from its checkpoint completes it to exactly
// what a full replay would give.
func (t *Tailer) Run(ctx context.Context) (Restored, error) {
	now := t.Now
	if now == nil {
		now = time.Now
	}
	check := t.Check
	if check <= 0 {
		check = time.Minute
	}
	res, err := Restore(ctx, t.Admin, t.NewClient, t.Topic, t.Partition, t.Store, now)
	if err != nil {
		return res, err
	}
	pos := t.Store.Checkpoint()
	progress := func(hwm int64) {
		if t.Progress != nil {
			t.Progress(ctx, TailProgress{Applied: pos, Lag: max(hwm-pos, 0)})
		}
	}
	progress(pos)
	cl, err := t.NewClient(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{t.Topic: {t.Partition: kgo.NewOffset().At(pos)}}),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
		// A gap fails the tail rather than skipping silently; the next
		// Restore wipes.
		kgo.ConsumeResetOffset(kgo.NoResetOffset()),
	)
	if err != nil {
		return res, fmt.Errorf("state: tail %s[%d]: %w", t.Topic, t.Partition, err)
	}
	defer cl.Close()
	hwm := pos
	// The checkpoint time Restore wrote is fresh; the next refresh is due
	// a Check from now, and is retried at every poll until it succeeds (it
	// needs a moment with no transaction open on the partition).
	nextCheck := now().Add(check)
	for {
		muts, next, end, err := poll(ctx, cl, "tail", pos)
		if err != nil {
			return res, err
		}
		hwm = max(hwm, end)
		if next > pos {
			// The zero time keeps the recorded one, which holds for every
			// record past a later checkpoint too.
			if err := t.Store.Apply(ctx, lastPerKey(muts), next, time.Time{}); err != nil {
				return res, err
			}
			pos = next
		}
		if at := now(); !at.Before(nextCheck) {
			caughtUp, end, err := t.check(ctx, res.Changelog, pos, at)
			if err != nil {
				return res, err
			}
			hwm = end
			if caughtUp {
				nextCheck = at.Add(check)
			}
		}
		progress(hwm)
	}
}

// poll fetches once from a client consuming one changelog partition at
// pos, and returns the mutations of the data records at or past pos, in
// offset order; the offset past the last record fetched, control records
// included (pos when nothing was); and the partition's high watermark as
// the fetch reported it (0 when nothing was fetched). A fetch error fails
// it, naming what polls (a restore or a tail); ctx's end is its error.
func poll(ctx context.Context, cl *kgo.Client, what string, pos int64) (muts []protocol.Mutation, next, hwm int64, err error) {
	pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	fs := cl.PollFetches(pctx)
	cancel()
	if err := ctx.Err(); err != nil {
		return nil, pos, 0, err
	}
	fs.EachError(func(t string, p int32, ferr error) {
		if !errors.Is(ferr, context.DeadlineExceeded) && !errors.Is(ferr, context.Canceled) && err == nil {
			err = fmt.Errorf("state: %s %s[%d]: fetch: %w", what, t, p, ferr)
		}
	})
	if err != nil {
		return nil, pos, 0, err
	}
	next = pos
	muts = make([]protocol.Mutation, 0, fs.NumRecords())
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		hwm = max(hwm, p.HighWatermark)
		for _, r := range p.Records {
			if r.Offset < next {
				continue
			}
			next = r.Offset + 1
			if !r.Attrs.IsControl() {
				muts = append(muts, protocol.Mutation{Key: string(r.Key), Value: r.Value, Delete: r.Value == nil})
			}
		}
	})
	return muts, next, hwm, nil
}

// check lists the partition's offsets and the changelog's identity as of
// at, fails when the tail can no longer continue, and refreshes the
// checkpoint time to at when the store has applied everything committed
// and no transaction is open (the rule Restore uses). It returns whether
// it refreshed, and the high watermark.
func (t *Tailer) check(ctx context.Context, inc Incarnation, pos int64, at time.Time) (bool, int64, error) {
	lso, hwm, start, err := bounds(ctx, t.Admin, t.Topic, t.Partition)
	if err != nil {
		return false, 0, err
	}
	cur, err := incarnation(ctx, t.Admin, t.Topic)
	if err != nil {
		return false, hwm, err
	}
	switch {
	case cur != inc:
		return false, hwm, fmt.Errorf("%w: %s was %s, now %s", ErrRecreatedDuringRestore, t.Topic, inc, cur)
	case pos > hwm:
		return false, hwm, &ChangelogLostError{Path: t.Store.Path(), Topic: t.Topic, Partition: t.Partition, Incarnation: inc, End: hwm, Checkpoint: pos}
	case start > pos:
		return false, hwm, fmt.Errorf("%w: %s[%d] starts at %d, the store is at %d", ErrLogStartPassed, t.Topic, t.Partition, start, pos)
	case pos < lso || lso != hwm:
		return false, hwm, nil
	}
	if err := t.Store.Apply(ctx, nil, pos, at); err != nil {
		return false, hwm, err
	}
	return true, hwm, nil
}
