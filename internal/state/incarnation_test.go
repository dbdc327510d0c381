package state

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"
)

func put(k, v string) protocol.Mutation { return protocol.Mutation{Key: k, Value: []byte(v)} }

// recreate deletes the changelog topic and creates it again, empty, with a
// new transactional writer: a new incarnation under the same name.
func (l *changelog) recreate(ctx context.Context) {
	l.t.Helper()
	if _, err := l.c.Admin().DeleteTopics(ctx, "cl"); err != nil {
		l.t.Fatal(err)
	}
	if err := l.c.CreateTopics(ctx, broker.Topic{Name: "cl", Configs: map[string]*string{"cleanup.policy": ptr("compact")}}); err != nil {
		l.t.Fatal(err)
	}
	l.tx.Close()
	tx, err := l.c.NewClient(kgo.TransactionalID("w2"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(tx.Close)
	l.tx = tx
}

func (l *changelog) tryRestore(ctx context.Context, s *Store, now time.Time) (Restored, error) {
	newClient := func(opts ...kgo.Opt) (*kgo.Client, error) { return l.c.NewClient(opts...) }
	return Restore(ctx, l.c.Admin(), newClient, "cl", 0, s, func() time.Time { return now })
}

// TestRestoreWipesStoreOfAnotherIncarnation: a store restored from one
// incarnation of its changelog is wiped and rebuilt when the topic was
// deleted and created again — whether the new log is shorter than the
// checkpoint (every development cluster that was recreated) or longer
// (where offsets alone would pass for a valid resume) — and when the
// recorded cluster differs. The new incarnation is recorded, so the next
// restore resumes from the checkpoint.
func TestRestoreWipesStoreOfAnotherIncarnation(t *testing.T) {
	now := time.Now().Truncate(time.Millisecond)
	for _, tc := range []struct {
		name  string
		newer []protocol.Mutation // the new incarnation's records
		want  map[string]string
	}{
		{"shorter than the checkpoint", []protocol.Mutation{put("n1", "1")}, map[string]string{"n1": "1"}},
		{"longer than the checkpoint", []protocol.Mutation{put("n1", "1"), put("n2", "2"), put("n3", "3"), put("n4", "4"), put("n5", "5")},
			map[string]string{"n1": "1", "n2": "2", "n3": "3", "n4": "4", "n5": "5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l := newChangelog(t, nil)
			s := open(t, filepath.Join(t.TempDir(), "t.db"))
			l.commit(ctx, now, put("k1", "1"), put("k2", "2"))
			l.restore(ctx, s, now)
			old := l.incarnation(ctx)
			if got, ok := s.Mirrors(); !ok || got != old {
				t.Fatalf("store mirrors %v (%v), want %v", got, ok, old)
			}
			cp := s.Checkpoint()

			l.recreate(ctx)
			l.commit(ctx, now, tc.newer...)
			cur := l.incarnation(ctx)
			if cur == old {
				t.Fatalf("premise: recreated topic kept its incarnation %v", cur)
			}
			res := l.restore(ctx, s, now)
			if !res.Wiped || !res.Reincarnated || res.Reason != reasonIncarnation {
				t.Fatalf("restore = %+v, want wiped: %s", res, reasonIncarnation)
			}
			if res.Previous != old || res.Changelog != cur || res.From != cp {
				t.Fatalf("restore reported previous %v, changelog %v, from %d; want %v, %v, %d", res.Previous, res.Changelog, res.From, old, cur, cp)
			}
			if got := contents(t, s); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("store = %q, want %q (nothing of the old incarnation)", got, tc.want)
			}
			if got, _ := s.Mirrors(); got != cur {
				t.Fatalf("store mirrors %v after the wipe, want %v", got, cur)
			}
			if res := l.restore(ctx, s, now); res.Wiped {
				t.Fatalf("second restore on the new incarnation wiped: %+v", res)
			}
		})
	}

	t.Run("another cluster", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l := newChangelog(t, nil)
		s := open(t, filepath.Join(t.TempDir(), "t.db"))
		l.commit(ctx, now, put("k1", "1"))
		l.restore(ctx, s, now)
		cur := l.incarnation(ctx)
		// The same topic ID recorded under another cluster ID (a store
		// copied between clusters that share topic IDs).
		other := Incarnation{Cluster: cur.Cluster + "-other", TopicID: cur.TopicID}
		if err := s.Reset(ctx, other); err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(ctx, []protocol.Mutation{put("stale", "x")}, 1, now); err != nil {
			t.Fatal(err)
		}
		res := l.restore(ctx, s, now)
		if !res.Reincarnated || res.Previous != other || res.Changelog != cur {
			t.Fatalf("restore = %+v, want reincarnated from %v to %v", res, other, cur)
		}
		if want := map[string]string{"k1": "1"}; !reflect.DeepEqual(contents(t, s), want) {
			t.Fatalf("store = %q, want %q", contents(t, s), want)
		}
	})
}

// TestRestoreRefusesChangelogThatLostRecords: a store whose checkpoint is
// past the end of the very incarnation it mirrors is not wiped — however
// old or untrusted it is otherwise — but refused with a *ChangelogLostError
// that names the store, the topic and both offsets and says what the
// operator can do. The file is left as it was.
func TestRestoreRefusesChangelogThatLostRecords(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now().Truncate(time.Millisecond)
	for _, cpAge := range []time.Duration{time.Minute, 48 * time.Hour} {
		l := newChangelog(t, nil)
		path := filepath.Join(t.TempDir(), "t.db")
		s := open(t, path)
		l.commit(ctx, now, put("k1", "1"))
		l.restore(ctx, s, now)
		end := s.Checkpoint()
		// What a broker that lost its last records looks like from the
		// store: a checkpoint past the end of the same topic.
		if err := s.Apply(ctx, []protocol.Mutation{put("k2", "2")}, end+7, now.Add(-cpAge)); err != nil {
			t.Fatal(err)
		}
		_, err := l.tryRestore(ctx, s, now)
		var lost *ChangelogLostError
		if !errors.As(err, &lost) || !errors.Is(err, ErrChangelogBehind) {
			t.Fatalf("checkpoint %v old: Restore = %v, want a ChangelogLostError", cpAge, err)
		}
		if want := (ChangelogLostError{Path: path, Topic: "cl", Partition: 0, Incarnation: l.incarnation(ctx), End: end, Checkpoint: end + 7}); *lost != want {
			t.Fatalf("error = %+v, want %+v", *lost, want)
		}
		for _, s := range []string{path, "cl[0]", "lost records", "delete this store file"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("message %q does not mention %q", err, s)
			}
		}
		if want := map[string]string{"k1": "1", "k2": "2"}; !reflect.DeepEqual(contents(t, s), want) || s.Checkpoint() != end+7 {
			t.Fatalf("refused store was changed: %q at %d", contents(t, s), s.Checkpoint())
		}
	}
}

// TestStoreWithoutIdentityMigrates: a file written before the changelog's
// identity was recorded (no changelog table) opens, is wiped once — it may
// mirror any incarnation, so its checkpoint proves nothing, even one past
// the end — and records the current incarnation, which survives a reopen.
// Such a file that is empty is only stamped.
func TestStoreWithoutIdentityMigrates(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := time.Now().Truncate(time.Millisecond)
	// previousRelease writes what the previous release left: its schema,
	// keys and a checkpoint, no changelog table.
	previousRelease := func(path string, muts []protocol.Mutation, cp int64) {
		t.Helper()
		s, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(ctx, muts, cp, now); err != nil {
			t.Fatal(err)
		}
		s.Close()
		db, err := sql.Open("sqlite", path)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec("DROP TABLE changelog"); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name      string
		muts      []protocol.Mutation
		cp        int64
		wantWiped bool
	}{
		{"checkpoint within the log", []protocol.Mutation{put("k1", "1"), put("stale", "x")}, 1, true},
		{"checkpoint past the end", []protocol.Mutation{put("stale", "x")}, 500, true},
		{"empty", nil, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newChangelog(t, nil)
			l.commit(ctx, now, put("k1", "1"))
			path := filepath.Join(t.TempDir(), "t.db")
			previousRelease(path, tc.muts, tc.cp)
			s := open(t, path)
			if inc, ok := s.Mirrors(); ok {
				t.Fatalf("file without identity mirrors %v", inc)
			}
			res := l.restore(ctx, s, now)
			if res.Wiped != tc.wantWiped || (tc.wantWiped && res.Reason != reasonNoIdentity) || res.Reincarnated {
				t.Fatalf("restore = %+v, want wiped %v (%s)", res, tc.wantWiped, reasonNoIdentity)
			}
			if want := map[string]string{"k1": "1"}; !reflect.DeepEqual(contents(t, s), want) {
				t.Fatalf("store = %q, want %q", contents(t, s), want)
			}
			s.Close()
			s = open(t, path)
			if got, ok := s.Mirrors(); !ok || got != l.incarnation(ctx) {
				t.Fatalf("reopened store mirrors %v (%v), want %v", got, ok, l.incarnation(ctx))
			}
			if res := l.restore(ctx, s, now); res.Wiped {
				t.Fatalf("restore after the migration wiped: %+v", res)
			}
		})
	}
}

// TestRestoreNeedsTopicIDs: a broker that serves no topic IDs (Kafka before
// 2.8) cannot tell a recreated changelog from the original, so Restore
// refuses with ErrNoTopicID, naming the topic, and leaves the store alone.
func TestRestoreNeedsTopicIDs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := broker.New(t, broker.FakeOpts(kfake.MaxVersions(kversion.V2_7_0())), broker.Topics(broker.Topic{Name: "cl"}))
	s := open(t, filepath.Join(t.TempDir(), "t.db"))
	newClient := func(opts ...kgo.Opt) (*kgo.Client, error) { return c.NewClient(opts...) }
	_, err := Restore(ctx, c.Admin(), newClient, "cl", 0, s, nil)
	if !errors.Is(err, ErrNoTopicID) || !strings.Contains(err.Error(), "cl") {
		t.Fatalf("Restore against a 2.7 broker = %v, want ErrNoTopicID naming cl", err)
	}
	if _, ok := s.Mirrors(); ok {
		t.Fatal("the store records an incarnation without a topic ID")
	}
}
