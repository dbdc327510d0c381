package state

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kgo"
)

func open(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestApplyScanAndCheckpointSurviveReopen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "t.db")
	s := open(t, path)
	muts := []protocol.Mutation{
		{Key: "a/1", Value: []byte("x")},
		{Key: "a/2", Value: []byte{}},
		{Key: "a\xff", Value: []byte("edge")},
		{Key: "b", Value: []byte("y")},
		{Key: "\x02k", Value: []byte{0}},
	}
	if err := s.Apply(ctx, muts, 42, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Apply(ctx, []protocol.Mutation{{Key: "b", Delete: true}}, 40, time.Time{}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, path)
	if s.Checkpoint() != 42 {
		t.Fatalf("checkpoint = %d, want 42 (never moves back)", s.Checkpoint())
	}
	var keys []string
	if err := s.Scan("a", func(k string, v []byte) error { keys = append(keys, k); return nil }); err != nil {
		t.Fatal(err)
	}
	if want := []string{"a/1", "a/2", "a\xff"}; !reflect.DeepEqual(keys, want) {
		t.Fatalf("Scan(a) = %q, want %q", keys, want)
	}
	if v, ok, err := s.Get("a/2"); err != nil || !ok || v == nil || len(v) != 0 {
		t.Fatalf("Get(a/2) = %q, %v, %v; want present and empty", v, ok, err)
	}
	if _, ok, _ := s.Get("b"); ok {
		t.Fatal("deleted key still present")
	}
	if err := s.Put("x", nil); err == nil {
		t.Fatal("Put outside a batch accepted")
	}
}

func TestBatchOverStore(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "t.db"))
	if err := s.Apply(ctx, []protocol.Mutation{{Key: "k1", Value: []byte("1")}, {Key: "k3", Value: []byte("3")}}, 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	b := protocol.NewBatch(s)
	b.Put("k2", []byte("2"))
	b.Delete("k1")
	var got []string
	b.Scan("k", func(k string, v []byte) error { got = append(got, k+"="+string(v)); return nil })
	if want := []string{"k2=2", "k3=3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("batch scan = %q, want %q", got, want)
	}
	if err := s.Apply(ctx, b.Mutations(), 2, time.Time{}); err != nil {
		t.Fatal(err)
	}
	b.Discard()
	all, _ := s.Entries()
	if len(all) != 2 || all[0].Key != "k2" || all[1].Key != "k3" {
		t.Fatalf("store after apply = %+v", all)
	}
}

func TestUnknownSchemaRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	s := open(t, path)
	s.Close()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("PRAGMA user_version = 99"); err != nil {
		t.Fatal(err)
	}
	db.Close()
	if _, err := Open(context.Background(), path); !errors.Is(err, ErrUnknownSchema) {
		t.Fatalf("Open of a version-99 file = %v, want ErrUnknownSchema", err)
	}
}

// TestRestoreReplaysCommittedChangelog: only committed changelog records
// are applied, the last write per key wins, tombstones delete, and the
// checkpoint ends past the last marker. A checkpoint past the changelog's
// end is refused.
func TestRestoreReplaysCommittedChangelog(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := broker.New(t, broker.Topics(broker.Topic{Name: "cl", Partitions: 2}))
	tx, err := c.NewClient(kgo.TransactionalID("w"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	write := func(commit bool, ms ...protocol.Mutation) {
		if err := tx.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		rs := Records("cl", 1, ms)
		for i := range rs {
			if err := tx.ProduceSync(ctx, &rs[i]).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
			t.Fatal(err)
		}
	}
	write(true, protocol.Mutation{Key: "a", Value: []byte("1")}, protocol.Mutation{Key: "b", Value: []byte("1")})
	write(false, protocol.Mutation{Key: "a", Value: []byte("aborted")}, protocol.Mutation{Key: "c", Value: []byte("aborted")})
	write(true, protocol.Mutation{Key: "b", Delete: true}, protocol.Mutation{Key: "a", Value: []byte("2")}, protocol.Mutation{Key: "e", Value: []byte{}})

	s := open(t, filepath.Join(t.TempDir(), "t.db"))
	newClient := func(opts ...kgo.Opt) (*kgo.Client, error) { return c.NewClient(opts...) }
	if _, err := Restore(ctx, c.Admin(), newClient, "cl", 1, s, nil); err != nil {
		t.Fatal(err)
	}
	all, _ := s.Entries()
	got := map[string]string{}
	for _, m := range all {
		got[m.Key] = string(m.Value)
	}
	if want := map[string]string{"a": "2", "e": ""}; !reflect.DeepEqual(got, want) {
		t.Fatalf("restored %q, want %q", got, want)
	}
	// 2 + marker, 2 aborted + marker, 3 + marker.
	if s.Checkpoint() != 10 {
		t.Fatalf("checkpoint = %d, want 10", s.Checkpoint())
	}
	if err := s.Apply(ctx, nil, 50, time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := Restore(ctx, c.Admin(), newClient, "cl", 1, s, nil); !errors.Is(err, ErrChangelogBehind) {
		t.Fatalf("Restore with a checkpoint past the end = %v, want ErrChangelogBehind", err)
	}
}
