package state

import (
	"context"
	"errors"
	"fmt"
	"time"

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
	// Source reads the changelog partition; when nil, the tailer reads it
	// from the brokers through Admin and NewClient (KafkaSource).
	Source Source
	Admin  *kadm.Client
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
// and then follows the changelog (Follower): it applies each committed
// transaction at its commit marker, until ctx ends. It returns the first Restore's result and
// ctx's error, or the error that stopped it: a fetch error, a log start
// past the checkpoint (ErrLogStartPassed), a recreated changelog
// (ErrRecreatedDuringRestore) or one that lost records
// (*ChangelogLostError). Calling Run again recovers from any of them the
// way Restore does.
//
// A store that Run applied to is, at any moment, the changelog's state at
// a transaction boundary of it (its checkpoint), never part of a step;
// Restore from its checkpoint completes it to exactly what a full replay
// would give.
func (t *Tailer) Run(ctx context.Context) (Restored, error) {
	now := t.Now
	if now == nil {
		now = time.Now
	}
	check := t.Check
	if check <= 0 {
		check = time.Minute
	}
	src := t.Source
	if src == nil {
		src = KafkaSource(t.Admin, t.NewClient, t.Topic, t.Partition)
		defer src.Close()
	}
	res, err := RestoreFrom(ctx, src, t.Store, now)
	if err != nil {
		return res, err
	}
	f := NewFollower(StoreSink(t.Store), t.Store.Checkpoint())
	progress := func(hwm int64) {
		if t.Progress != nil {
			t.Progress(ctx, TailProgress{Applied: f.Applied(), Lag: max(hwm-f.Applied(), 0)})
		}
	}
	hwm := f.Applied()
	progress(hwm)
	// The checkpoint time Restore wrote is fresh; the next refresh is due
	// a Check from now, and is retried at every poll until it succeeds (it
	// needs a moment with no transaction open on the partition).
	nextCheck := now().Add(check)
	for {
		recs, next, end, err := src.Fetch(ctx, f.Position())
		if err != nil {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			return res, fmt.Errorf("state: tail %s[%d]: %w", src.Topic(), src.Partition(), err)
		}
		hwm = max(hwm, end)
		if err := f.Read(ctx, recs, next); err != nil {
			return res, fmt.Errorf("state: tail %s[%d]: %w", src.Topic(), src.Partition(), err)
		}
		if at := now(); !at.Before(nextCheck) {
			caughtUp, end, err := t.check(ctx, src, res.Changelog, f, at)
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
// pos, and returns the records at or past pos, in offset order, appended
// to recs; the offset
// past the last record fetched, control records included (pos when nothing
// was); and the partition's high watermark as the fetch reported it (0
// when nothing was fetched). A fetch error fails it, naming what polls (a
// restore or a tail); ctx's end is its error.
func poll(ctx context.Context, cl *kgo.Client, pos int64, recs []Record) (_ []Record, next, hwm int64, err error) {
	pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	fs := cl.PollFetches(pctx)
	cancel()
	if err := ctx.Err(); err != nil {
		return nil, pos, 0, err
	}
	fs.EachError(func(t string, p int32, ferr error) {
		if !errors.Is(ferr, context.DeadlineExceeded) && !errors.Is(ferr, context.Canceled) && err == nil {
			err = fmt.Errorf("fetch %s[%d]: %w", t, p, ferr)
		}
	})
	if err != nil {
		return nil, pos, 0, err
	}
	next = pos
	fs.EachPartition(func(p kgo.FetchTopicPartition) {
		hwm = max(hwm, p.HighWatermark)
		for _, r := range p.Records {
			if r.Offset < next || err != nil {
				continue
			}
			var rec Record
			if rec, err = RecordOf(r); err == nil {
				next = r.Offset + 1
				recs = append(recs, rec)
			}
		}
	})
	return recs, next, hwm, err
}

// check lists the partition's offsets and the changelog's identity as of
// at, fails when the tail can no longer continue, and refreshes the
// checkpoint time to at when the store has applied everything committed
// and no transaction is open (the rule Restore uses). It returns whether
// it refreshed, and the high watermark.
func (t *Tailer) check(ctx context.Context, src Source, inc Incarnation, f *Follower, at time.Time) (bool, int64, error) {
	lso, hwm, start, err := src.Bounds(ctx)
	if err != nil {
		return false, 0, err
	}
	cur, err := src.Incarnation(ctx)
	if err != nil {
		return false, hwm, err
	}
	pos := f.Applied()
	switch {
	case cur != inc:
		return false, hwm, fmt.Errorf("%w: %s was %s, now %s", ErrRecreatedDuringRestore, src.Topic(), inc, cur)
	case pos > hwm:
		return false, hwm, &ChangelogLostError{Path: t.Store.Path(), Topic: src.Topic(), Partition: src.Partition(), Incarnation: inc, End: hwm, Checkpoint: pos}
	case start > pos:
		return false, hwm, fmt.Errorf("%w: %s[%d] starts at %d, the store is at %d", ErrLogStartPassed, src.Topic(), src.Partition(), start, pos)
	case pos < lso || lso != hwm:
		return false, hwm, nil
	}
	if err := t.Store.Apply(ctx, nil, pos, at); err != nil {
		return false, hwm, err
	}
	return true, hwm, nil
}
