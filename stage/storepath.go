package stage

// Where a task's store lives, and moving stores from the layout of earlier
// releases.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/parsley-go/parsley/internal/state"
)

// storePath returns the file of the task store of a stage's partition p:
// <stateDir>/<applicationID>/<stage>-<p>.db. The application is part of
// the path so two applications sharing a state directory never share a
// file, even when they name a stage alike.
func storePath(stateDir, applicationID, stage string, p int32) string {
	return filepath.Join(stateDir, applicationID, fmt.Sprintf("%s-%d.db", stage, p))
}

// legacyStorePath is where releases before the application directory kept
// a task store.
func legacyStorePath(stateDir, stage string, p int32) string {
	return filepath.Join(stateDir, fmt.Sprintf("%s-%d.db", stage, p))
}

// storeFiles opens task store files in the application's state directory.
// Read-only once built; used by the session loop.
type storeFiles struct {
	stateDir, appID string
	cacheBytes      int64 // Config.StateCache
	cluster         cluster
	log             *slog.Logger
}

// open opens the store of stage st's task at partition p, moving a file
// of the earlier layout first. Any failure stops Run.
func (f storeFiles) open(ctx context.Context, st *Stage, p int32) (*state.Store, error) {
	path := storePath(f.stateDir, f.appID, st.name, p)
	if err := f.moveLegacy(ctx, st, p, path); err != nil {
		return nil, err
	}
	kv, err := state.Open(ctx, path, state.CacheBytes(f.cacheBytes))
	if err != nil {
		return nil, &fatal{fmt.Errorf("stage %q partition %d: %w", st.name, p, err)}
	}
	return kv, nil
}

// moveLegacy moves the store of stage st at partition p from the earlier
// layout to path.
func (f storeFiles) moveLegacy(ctx context.Context, st *Stage, p int32, path string) error {
	legacy := legacyStorePath(f.stateDir, st.name, p)
	moved, err := f.cluster.moveLegacy(ctx, ChangelogTopic(f.appID, st.name), legacy, path)
	if moved {
		f.log.Info("stage: task store moved into the application's directory", "stage", st.name, "partition", p, "from", legacy, "to", path)
	}
	if err == nil {
		return nil
	}
	err = fmt.Errorf("stage %q partition %d: move store %s: %w", st.name, p, legacy, err)
	var pe *fs.PathError
	var le *os.LinkError
	if errors.Is(err, state.ErrUnknownSchema) || errors.Is(err, state.ErrNoTopicID) || errors.As(err, &pe) || errors.As(err, &le) {
		return &fatal{err}
	}
	return err
}
