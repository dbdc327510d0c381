package state

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kgo"
)

// tailRun is a Tailer running on a goroutine.
type tailRun struct {
	cancel context.CancelFunc
	done   chan struct{}
	res    Restored
	err    error

	mu       sync.Mutex
	progress TailProgress
	polls    int
}

func (l *changelog) tail(s *Store, now func() time.Time, check time.Duration) *tailRun {
	ctx, cancel := context.WithCancel(context.Background())
	r := &tailRun{cancel: cancel, done: make(chan struct{})}
	tl := &Tailer{
		Admin:     l.c.Admin(),
		NewClient: func(opts ...kgo.Opt) (*kgo.Client, error) { return l.c.NewClient(opts...) },
		Topic:     "cl",
		Store:     s,
		Now:       now,
		Check:     check,
		Progress: func(_ context.Context, p TailProgress) {
			r.mu.Lock()
			r.progress = p
			r.polls++
			r.mu.Unlock()
		},
	}
	go func() {
		defer close(r.done)
		r.res, r.err = tl.Run(ctx)
	}()
	l.t.Cleanup(func() { cancel(); <-r.done })
	return r
}

// caughtUp waits until the tailer has applied everything below end and
// polled at least once more.
func (r *tailRun) caughtUp(t *testing.T, end int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	polls := -1
	for {
		r.mu.Lock()
		p, n := r.progress, r.polls
		r.mu.Unlock()
		if p.Applied >= end && polls < 0 {
			polls = n
		}
		if polls >= 0 && n > polls {
			return
		}
		select {
		case <-r.done:
			t.Fatalf("tailer stopped: %v", r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("tailer at %+v after 20s, want applied %d", p, end)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *tailRun) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	<-r.done
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("tailer returned %v, want context.Canceled", r.err)
	}
}

func (l *changelog) end(ctx context.Context) int64 {
	l.t.Helper()
	ends, err := l.c.Admin().ListEndOffsets(ctx, "cl")
	if err != nil {
		l.t.Fatal(err)
	}
	o, _ := ends.Lookup("cl", 0)
	return o.Offset
}

// abort writes ms in a transaction that aborts.
func (l *changelog) abort(ctx context.Context, ms ...protocol.Mutation) {
	l.t.Helper()
	if err := l.tx.BeginTransaction(); err != nil {
		l.t.Fatal(err)
	}
	rs := Records("cl", 0, ms)
	for i := range rs {
		if err := l.tx.ProduceSync(ctx, &rs[i]).FirstErr(); err != nil {
			l.t.Fatal(err)
		}
	}
	if err := l.tx.EndTransaction(ctx, kgo.TryAbort); err != nil {
		l.t.Fatal(err)
	}
}

// TestTailerKeepsCommittedCopy: a tailed store follows the changelog as it
// is written, applying committed records only (an aborted transaction's
// put and delete leave no trace), and what it holds equals a full restore
// into an empty store. A restore that resumes from the tailed copy reads
// nothing more. The checkpoint time is refreshed while tailing, so the
// copy is never wiped as too old at activation.
func TestTailerKeepsCommittedCopy(t *testing.T) {
	ctx := context.Background()
	l := newChangelog(t, nil)
	t0 := time.Now()
	l.commit(ctx, t0, put("k1", "v1"), put("k2", "v2"))
	var clock sync.Mutex
	wall := t0
	now := func() time.Time { clock.Lock(); defer clock.Unlock(); return wall }
	s := open(t, filepath.Join(t.TempDir(), "standby.db"))
	r := l.tail(s, now, time.Millisecond)
	r.caughtUp(t, l.end(ctx))

	l.abort(ctx, put("k3", "aborted"), del("k1"))
	l.commit(ctx, t0, put("k4", "v4"), del("k2"), put("k1", "v1b"))
	l.abort(ctx, put("k5", "aborted"))
	clock.Lock()
	wall = t0.Add(time.Hour)
	clock.Unlock()
	end := l.end(ctx)
	r.caughtUp(t, end)
	r.stop(t)

	want := map[string]string{"k1": "v1b", "k4": "v4"}
	if got := contents(t, s); !reflect.DeepEqual(got, want) {
		t.Fatalf("tailed store = %v, want %v (committed records only)", got, want)
	}
	if s.Checkpoint() != end {
		t.Fatalf("tailed store checkpoint %d, want the end %d", s.Checkpoint(), end)
	}
	if got := s.CheckpointTime(); !got.Equal(t0.Add(time.Hour).Truncate(time.Millisecond)) {
		t.Fatalf("checkpoint time %v, want the refresh at %v", got, t0.Add(time.Hour))
	}
	full := open(t, filepath.Join(t.TempDir(), "full.db"))
	if res := l.restore(ctx, full, t0.Add(time.Hour)); res.Records == 0 {
		t.Fatalf("full restore read no records: %+v", res)
	}
	if a, b := contents(t, s), contents(t, full); !reflect.DeepEqual(a, b) {
		t.Fatalf("tailed store %v, full restore %v", a, b)
	}
	res := l.restore(ctx, s, t0.Add(time.Hour+time.Minute))
	if res.Wiped || res.From != end || res.Records != 0 {
		t.Fatalf("restore from the tailed copy = %+v, want no wipe, from %d, no records read", res, end)
	}
}

// del is a delete of key (a tombstone in the changelog).
func del(key string) protocol.Mutation { return protocol.Mutation{Key: key, Delete: true} }

// TestTailerStopsOnRecreatedChangelog: the incarnation check holds for a
// tailed store as for a restored one. When the changelog is deleted and
// created again under a tailer, it stops with an error; run again, it
// wipes the copy of the old incarnation and follows the new one.
func TestTailerStopsOnRecreatedChangelog(t *testing.T) {
	ctx := context.Background()
	l := newChangelog(t, nil)
	l.commit(ctx, time.Now(), put("old", "1"), put("gone", "2"))
	s := open(t, filepath.Join(t.TempDir(), "standby.db"))
	r := l.tail(s, nil, time.Millisecond)
	r.caughtUp(t, l.end(ctx))
	before := l.incarnation(ctx)

	l.recreate(ctx)
	l.commit(ctx, time.Now(), put("new", "3"))
	select {
	case <-r.done:
	case <-time.After(20 * time.Second):
		t.Fatal("tailer still running 20s after its changelog was recreated")
	}
	if r.err == nil || errors.Is(r.err, context.Canceled) {
		t.Fatalf("tailer returned %v, want an error for the recreated changelog", r.err)
	}

	r = l.tail(s, nil, time.Millisecond)
	r.caughtUp(t, l.end(ctx))
	r.stop(t)
	if !r.res.Reincarnated || r.res.Previous != before {
		t.Fatalf("second tail's restore = %+v, want a wipe of incarnation %s", r.res, before)
	}
	if got, want := contents(t, s), map[string]string{"new": "3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("tailed store = %v, want %v", got, want)
	}
}
