package stage

// Where a task's store lives, and moving stores from the layout of earlier
// releases.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
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

// moveLegacyStore moves a task's store from the earlier layout to path
// when it is this application's: it mirrors this application's changelog,
// or predates the record of which changelog a store mirrors. A file that
// mirrors another changelog belongs to another application sharing the
// directory and stays.
func (a *App) moveLegacyStore(ctx context.Context, st *Stage, p int32, path string) error {
	legacy := legacyStorePath(a.cfg.StateDir, st.name, p)
	moved, err := state.MoveLegacy(ctx, a.topo.admin, ChangelogTopic(a.cfg.ApplicationID, st.name), legacy, path)
	if moved {
		a.log.Info("stage: task store moved into the application's directory", "stage", st.name, "partition", p, "from", legacy, "to", path)
	}
	if err == nil {
		return nil
	}
	err = fmt.Errorf("stage %q partition %d: move store %s: %w", st.name, p, legacy, err)
	// A file this build cannot read, or one the file system refuses to
	// move, does not get better by retrying; a broker answer may.
	var pe *fs.PathError
	var le *os.LinkError
	if errors.Is(err, state.ErrUnknownSchema) || errors.Is(err, state.ErrNoTopicID) || errors.As(err, &pe) || errors.As(err, &le) {
		return &fatal{err}
	}
	return err
}
