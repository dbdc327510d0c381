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

// acquireLease takes the lease on the cluster at addrs: a POSIX write lock
// on a file named after the addresses in the temp directory. POSIX locks
// belong to the process, which gives the lease the two properties the
// tests need: test processes exclude each other (two `go test` runs, or
// packages run without -p 1, cannot wipe the cluster under one another),
// while a process that holds the lease can take it again — a test that
// starts a second cluster in a subtest gets the same cluster, wiped,
// instead of deadlocking on itself. The kernel drops the lock when the
// process dies, and also when the process closes any descriptor of the
// file, so after a nested Close the rest of the outer test runs unleased;
// tests in one process run one at a time (the tier's packages use no
// t.Parallel), so only other processes could notice, and they wait for the
// lock as before. It waits as long as ctx allows.
func acquireLease(ctx context.Context, addrs []string) (release func(), err error) {
	sum := sha256.Sum256([]byte(strings.Join(addrs, ",")))
	path := filepath.Join(os.TempDir(), "parsley-test-brokers-"+hex.EncodeToString(sum[:8])+".lock")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("broker: lease on %s: %w", addrs, err)
	}
	lock := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: 0, Len: 0}
	for {
		err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lock)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EAGAIN) && !errors.Is(err, syscall.EACCES) {
			f.Close()
			return nil, fmt.Errorf("broker: lease on %s: %w", addrs, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("broker: lease on %s (another test process holds the cluster): %w", addrs, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
