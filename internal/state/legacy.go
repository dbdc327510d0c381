package state

// Moving a store file from the layout of an earlier release.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/twmb/franz-go/pkg/kadm"
)

// MoveLegacy moves the store file at legacy — its path in an earlier
// layout — to path, with its SQLite journal files, when path holds no file
// yet and the file at legacy mirrors the current incarnation of the
// changelog topic or records none (a file written before incarnations were
// recorded). It reports whether it moved the file. It asks the brokers
// only when there is a file to move.
//
// A legacy file that mirrors another changelog is left where it is: in a
// state directory shared by two applications it is the other
// application's store of a stage of the same name, and that application
// moves it when it next starts.
func MoveLegacy(ctx context.Context, admin *kadm.Client, topic, legacy, path string) (bool, error) {
	if exists, err := fileExists(path); err != nil || exists {
		return false, err
	}
	if exists, err := fileExists(legacy); err != nil || !exists {
		return false, err
	}
	// Opening and closing the file checkpoints its WAL into it, so the
	// main file alone is the whole store.
	old, err := Open(ctx, legacy)
	if err != nil {
		return false, err
	}
	mirrors, known := old.Mirrors()
	if err := old.Close(); err != nil {
		return false, fmt.Errorf("state: close %s: %w", legacy, err)
	}
	if known {
		inc, err := incarnation(ctx, admin, topic)
		if err != nil {
			return false, err
		}
		if mirrors != inc {
			return false, nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, fmt.Errorf("state: move %s: %w", legacy, err)
	}
	if err := os.Rename(legacy, path); err != nil {
		return false, fmt.Errorf("state: move %s: %w", legacy, err)
	}
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Rename(legacy+suffix, path+suffix); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return true, fmt.Errorf("state: move %s: %w", legacy+suffix, err)
		}
	}
	return true, nil
}

func fileExists(path string) (bool, error) {
	_, err := os.Stat(path)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, fs.ErrNotExist):
		return false, nil
	}
	return false, fmt.Errorf("state: %w", err)
}
