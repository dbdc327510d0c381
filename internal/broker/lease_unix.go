//go:build unix

package broker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// acquireLease takes the exclusive lease on the cluster at addrs: a flock
// on a file named after the addresses in the temp directory. flock locks
// belong to an open file, so two Starts in one process exclude each other
// as two processes do, and the kernel releases the lock of a process that
// dies. It waits as long as ctx allows.
func acquireLease(ctx context.Context, addrs []string) (release func(), err error) {
	sum := sha256.Sum256([]byte(strings.Join(addrs, ",")))
	path := filepath.Join(os.TempDir(), "parsley-test-brokers-"+hex.EncodeToString(sum[:8])+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("broker: lease on %s: %w", addrs, err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("broker: lease on %s: %w", addrs, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("broker: lease on %s (another test holds the cluster): %w", addrs, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
