package state

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// changelog is a compacted one-partition changelog on an embedded broker
// and a transactional writer for it.
type changelog struct {
	t  testing.TB
	c  *broker.Cluster
	tx *kgo.Client
}

func newChangelog(t testing.TB, configs map[string]*string) *changelog {
	t.Helper()
	cfg := map[string]*string{"cleanup.policy": ptr("compact")}
	for k, v := range configs {
		cfg[k] = v
	}
	c := broker.New(t, broker.Topics(broker.Topic{Name: "cl", Configs: cfg}))
	tx, err := c.NewClient(kgo.TransactionalID("w"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tx.Close)
	return &changelog{t: t, c: c, tx: tx}
}

func ptr[T any](v T) *T { return &v }

// commit writes ms in one committed transaction, every record with
// timestamp ts (compaction ages tombstones by it).
func (l *changelog) commit(ctx context.Context, ts time.Time, ms ...protocol.Mutation) {
	l.t.Helper()
	if err := l.tx.BeginTransaction(); err != nil {
		l.t.Fatal(err)
	}
	rs := Records("cl", 0, ms)
	for i := range rs {
		r := &rs[i]
		r.Timestamp = ts
		l.tx.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				l.t.Error(err)
			}
		})
	}
	if err := l.tx.Flush(ctx); err != nil {
		l.t.Fatal(err)
	}
	if err := l.tx.EndTransaction(ctx, kgo.TryCommit); err != nil {
		l.t.Fatal(err)
	}
}

func (l *changelog) restore(ctx context.Context, s *Store, now time.Time) Restored {
	l.t.Helper()
	newClient := func(opts ...kgo.Opt) (*kgo.Client, error) { return l.c.NewClient(opts...) }
	res, err := Restore(ctx, l.c.Admin(), newClient, "cl", 0, s, func() time.Time { return now })
	if err != nil {
		l.t.Fatal(err)
	}
	return res
}

// incarnation returns the changelog's current incarnation.
func (l *changelog) incarnation(ctx context.Context) Incarnation {
	l.t.Helper()
	inc, err := incarnation(ctx, l.c.Admin(), "cl")
	if err != nil {
		l.t.Fatal(err)
	}
	return inc
}

// keys returns every key still in the log, tombstones included.
func (l *changelog) keys(ctx context.Context) map[string]bool {
	l.t.Helper()
	ends, err := l.c.Admin().ListEndOffsets(ctx, "cl")
	if err != nil {
		l.t.Fatal(err)
	}
	end, _ := ends.Lookup("cl", 0)
	cl, err := l.c.NewClient(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"cl": {0: kgo.NewOffset().AtStart()}}),
		kgo.KeepControlRecords(),
	)
	if err != nil {
		l.t.Fatal(err)
	}
	defer cl.Close()
	keys := map[string]bool{}
	for next := int64(0); next < end.Offset; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			l.t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			next = r.Offset + 1
			if !r.Attrs.IsControl() {
				keys[string(r.Key)] = true
			}
		})
	}
	return keys
}

func contents(t testing.TB, s *Store) map[string]string {
	t.Helper()
	all, err := s.Entries()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, m := range all {
		got[m.Key] = string(m.Value)
	}
	return got
}

// TestRestoreWipesStoreOlderThanTombstoneRetention: a store restored up to
// a checkpoint sleeps; meanwhile k1 is deleted (a tombstone past the
// checkpoint) and the changelog is compacted, which — once the tombstone is
// older than delete.retention.ms — removes k1's value and its tombstone
// alike. A store whose checkpoint is that old must be wiped and rebuilt
// from the log start, or it keeps k1 forever; a younger one replays the
// surviving tombstone and is not wiped. The topic leaves
// delete.retention.ms at Kafka's default, which Restore falls back to.
func TestRestoreWipesStoreOlderThanTombstoneRetention(t *testing.T) {
	now := time.Now().Truncate(time.Millisecond) // the store keeps milliseconds
	limit := wipeAge(DefaultDeleteRetention)
	for _, tc := range []struct {
		name       string
		cpAge      time.Duration // checkpoint age at the restart
		tombAge    time.Duration // tombstone age at compaction; compacted away if ≥ 24h
		wantWiped  bool
		tombstoned bool // the premise: compaction removed k1's tombstone
	}{
		{"aged past retention, tombstone compacted", 26 * time.Hour, 25 * time.Hour, true, true},
		{"fresh, tombstone kept", time.Minute, 30 * time.Second, false, false},
		{"at the limit", limit, time.Hour, true, false},
		{"just under the limit", limit - time.Second, time.Hour, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l := newChangelog(t, nil)
			s := open(t, filepath.Join(t.TempDir(), "t.db"))
			l.commit(ctx, now.Add(-tc.cpAge-time.Hour), protocol.Mutation{Key: "k1", Value: []byte("1")}, protocol.Mutation{Key: "k2", Value: []byte("1")})
			cpTime := now.Add(-tc.cpAge)
			if res := l.restore(ctx, s, cpTime); res.Wiped {
				t.Fatalf("first restore of an empty store wiped: %+v", res)
			}
			if got := s.CheckpointTime(); !got.Equal(cpTime) {
				t.Fatalf("checkpoint time = %v, want %v", got, cpTime)
			}
			cp := s.Checkpoint()

			// The store sleeps; k1 is deleted and k3 written elsewhere.
			l.commit(ctx, now.Add(-tc.tombAge), protocol.Mutation{Key: "k1", Delete: true})
			l.commit(ctx, now, protocol.Mutation{Key: "k3", Value: []byte("3")})
			l.c.Fake().Compact()
			if gone := !l.keys(ctx)["k1"]; gone != tc.tombstoned {
				t.Fatalf("premise: k1 gone from the compacted log = %v, want %v", gone, tc.tombstoned)
			}

			res := l.restore(ctx, s, now)
			if want := map[string]string{"k2": "1", "k3": "3"}; !reflect.DeepEqual(contents(t, s), want) {
				t.Fatalf("store after restart = %q, want %q (k1 was deleted)", contents(t, s), want)
			}
			if res.Wiped != tc.wantWiped {
				t.Fatalf("wiped = %v (%+v), want %v", res.Wiped, res, tc.wantWiped)
			}
			if res.Window != DefaultDeleteRetention || res.Age != tc.cpAge || res.From != cp {
				t.Fatalf("restore reported %+v, want window %v, age %v, from %d", res, DefaultDeleteRetention, tc.cpAge, cp)
			}
			if tc.wantWiped && res.Reason != reasonAge {
				t.Fatalf("reason = %q, want %q", res.Reason, reasonAge)
			}
			if !s.CheckpointTime().Equal(now) || s.Checkpoint() != res.To {
				t.Fatalf("checkpoint %d at %v after restore, want %d at %v", s.Checkpoint(), s.CheckpointTime(), res.To, now)
			}
		})
	}
}

// TestRestoreWipesUntrustedCheckpoints: a store whose checkpoint time is
// unknown (written before it was recorded, or a half-done wipe) or whose
// checkpoint is below the log start (DeleteRecords or delete retention
// removed records it never saw) is wiped however young; a new, empty store
// is not. A delete.retention.ms the broker reports is used, and one that is
// not a duration stops the restore with ErrBadRetention.
func TestRestoreWipesUntrustedCheckpoints(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now().Truncate(time.Millisecond) // the store keeps milliseconds
	put := func(k, v string) protocol.Mutation { return protocol.Mutation{Key: k, Value: []byte(v)} }

	t.Run("log start past the checkpoint", func(t *testing.T) {
		l := newChangelog(t, nil)
		s := open(t, filepath.Join(t.TempDir(), "t.db"))
		l.commit(ctx, now, put("k1", "1"), put("k2", "1"))
		l.restore(ctx, s, now.Add(-time.Minute))
		l.commit(ctx, now, protocol.Mutation{Key: "k1", Delete: true})
		l.commit(ctx, now, put("k3", "3"))
		// What compaction does to the tombstone, done by DeleteRecords:
		// the log now starts past it.
		ends, err := l.c.Admin().ListEndOffsets(ctx, "cl")
		if err != nil {
			t.Fatal(err)
		}
		end, _ := ends.Lookup("cl", 0)
		if _, err := l.c.Admin().DeleteRecords(ctx, kgoOffsets("cl", end.Offset-2)); err != nil {
			t.Fatal(err)
		}
		res := l.restore(ctx, s, now)
		if want := map[string]string{"k3": "3"}; !reflect.DeepEqual(contents(t, s), want) {
			t.Fatalf("store = %q, want %q (k1 was deleted, k2 removed)", contents(t, s), want)
		}
		if !res.Wiped || res.Reason != reasonLogStart {
			t.Fatalf("restore = %+v, want wiped: %s", res, reasonLogStart)
		}
	})

	t.Run("unknown checkpoint time", func(t *testing.T) {
		l := newChangelog(t, map[string]*string{"delete.retention.ms": ptr("3600000")})
		s := open(t, filepath.Join(t.TempDir(), "t.db"))
		l.commit(ctx, now, put("k1", "1"))
		// A store of this changelog (Reset records which) whose time is
		// unknown.
		if err := s.Reset(ctx, l.incarnation(ctx)); err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(ctx, []protocol.Mutation{put("k1", "1"), put("stale", "x")}, 2, time.Time{}); err != nil {
			t.Fatal(err)
		}
		res := l.restore(ctx, s, now)
		if !res.Wiped || res.Reason != reasonUnknown {
			t.Fatalf("restore = %+v, want wiped: %s", res, reasonUnknown)
		}
		if want := map[string]string{"k1": "1"}; !reflect.DeepEqual(contents(t, s), want) {
			t.Fatalf("store = %q, want %q", contents(t, s), want)
		}
		// Now the time is known, and the topic's own window applies:
		// 50 minutes is under 1h less its margin, 55 minutes is not.
		if res := l.restore(ctx, s, now.Add(50*time.Minute)); res.Wiped || res.Window != time.Hour {
			t.Fatalf("restore 50m later = %+v, want no wipe under a 1h window", res)
		}
		if res := l.restore(ctx, s, now.Add(50*time.Minute+55*time.Minute)); !res.Wiped || res.Reason != reasonAge {
			t.Fatalf("restore 55m after that = %+v, want wiped: %s", res, reasonAge)
		}
	})

	t.Run("new store", func(t *testing.T) {
		l := newChangelog(t, nil)
		s := open(t, filepath.Join(t.TempDir(), "t.db"))
		l.commit(ctx, now, put("k1", "1"))
		if res := l.restore(ctx, s, now); res.Wiped {
			t.Fatalf("restore of a new store = %+v, want no wipe", res)
		}
	})

	t.Run("bad delete.retention.ms", func(t *testing.T) {
		l := newChangelog(t, map[string]*string{"delete.retention.ms": ptr("-5")})
		s := open(t, filepath.Join(t.TempDir(), "t.db"))
		l.commit(ctx, now, put("k1", "1"))
		l.restore(ctx, s, now)
		newClient := func(opts ...kgo.Opt) (*kgo.Client, error) { return l.c.NewClient(opts...) }
		_, err := Restore(ctx, l.c.Admin(), newClient, "cl", 0, s, func() time.Time { return now })
		if !errors.Is(err, ErrBadRetention) {
			t.Fatalf("Restore = %v, want ErrBadRetention", err)
		}
	})
}

func TestWipeAge(t *testing.T) {
	for _, tc := range []struct{ window, want time.Duration }{
		{24 * time.Hour, 24*time.Hour - 144*time.Minute},
		{time.Hour, 54 * time.Minute},
		{5 * time.Minute, 4 * time.Minute},
		{0, -time.Minute},
	} {
		if got := wipeAge(tc.window); got != tc.want {
			t.Errorf("wipeAge(%v) = %v, want %v", tc.window, got, tc.want)
		}
	}
}

func kgoOffsets(topic string, at int64) kadm.Offsets {
	os := kadm.Offsets{}
	os.Add(kadm.Offset{Topic: topic, Partition: 0, At: at, LeaderEpoch: -1})
	return os
}
