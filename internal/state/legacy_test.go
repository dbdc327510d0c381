package state

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/parsley-go/parsley/protocol"
)

// TestMoveLegacy: a store in the earlier layout moves to its new path,
// contents and checkpoint intact, when it mirrors the current incarnation
// of its changelog or records none; it stays when it mirrors another
// changelog (another application's store in a shared directory), when the
// new path already holds a store, or when there is nothing to move.
func TestMoveLegacy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l := newChangelog(t, nil)
	cur, err := incarnation(ctx, l.c.Admin(), "cl")
	if err != nil {
		t.Fatal(err)
	}
	other := cur
	other.TopicID[0] ^= 0xff

	// write makes a store at path holding k=v at checkpoint 7, recording
	// inc when it is non-nil.
	write := func(t *testing.T, path string, inc *Incarnation) {
		t.Helper()
		s, err := Open(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if inc != nil {
			if err := s.Reset(ctx, *inc); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.Apply(ctx, []protocol.Mutation{put("k", "v")}, 7, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name      string
		legacy    bool
		mirrors   *Incarnation
		newExists bool
		wantMoved bool
	}{
		{"mirrors this changelog", true, &cur, false, true},
		{"predates incarnations", true, nil, false, true},
		{"mirrors another changelog", true, &other, false, false},
		{"new path taken", true, &cur, true, false},
		{"nothing to move", false, nil, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			legacy, path := filepath.Join(dir, "s-0.db"), filepath.Join(dir, "app", "s-0.db")
			if tc.legacy {
				write(t, legacy, tc.mirrors)
			}
			if tc.newExists {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				s, err := Open(ctx, path)
				if err != nil {
					t.Fatal(err)
				}
				s.Close()
			}
			moved, err := MoveLegacy(ctx, l.c.Admin(), "cl", legacy, path)
			if err != nil || moved != tc.wantMoved {
				t.Fatalf("MoveLegacy = %v, %v; want %v, nil", moved, err, tc.wantMoved)
			}
			_, legacyErr := os.Stat(legacy)
			if stayed := legacyErr == nil; stayed != (tc.legacy && !moved) {
				t.Errorf("legacy file still there = %v, want %v", stayed, tc.legacy && !moved)
			}
			if !moved {
				return
			}
			for _, suffix := range []string{"-wal", "-shm"} {
				if _, err := os.Stat(legacy + suffix); err == nil {
					t.Errorf("%s left behind", legacy+suffix)
				}
			}
			s, err := Open(ctx, path)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			v, ok, err := s.Get("k")
			if err != nil || !ok || string(v) != "v" || s.Checkpoint() != 7 {
				t.Errorf("moved store: k = %q, %v, %v; checkpoint %d; want v at checkpoint 7", v, ok, err, s.Checkpoint())
			}
		})
	}
}
