// Package wait holds the one context-aware pause the runtime packages
// share: a retry backoff that ends early when its context does.
package wait

import (
	"context"
	"time"
)

// Sleep waits for d or until ctx ends, whichever comes first, and returns
// ctx.Err() in the second case. Unlike time.Sleep it frees the caller as
// soon as ctx is cancelled, so shutdown never waits out a backoff.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
