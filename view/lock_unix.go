//go:build unix

package view

import (
	"errors"
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on path, creating it: one per open
// file description, so two views in one process exclude each other as two
// processes do. The kernel drops it when the process dies.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked", ErrStateInUse, path)
		}
		return nil, fmt.Errorf("view: lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}
