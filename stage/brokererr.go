package stage

// Which client errors a broker failover produces and a retry on the same
// client outlives.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/parsley-go/parsley/internal/kclient"
	"github.com/parsley-go/parsley/internal/wait"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// brokerFailover reports whether err is what a broker that died or moved
// a leadership or coordinator away answers with: a connection refused or
// reset, or a retriable Kafka error (NOT_COORDINATOR,
// COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, ...). A
// context's end is not one: the caller is stopping.
func brokerFailover(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if ke := (*kerr.Error)(nil); errors.As(err, &ke) {
		return ke.Retriable
	}
	var ne net.Error
	return errors.As(err, &ne)
}

// initProducer loads the session's producer ID, which fences every earlier
// incarnation of this instance and aborts its open transaction. While the
// transaction coordinator fails over the load fails: it is retried on the
// same client, which reloads the ID on every call, for up to a
// transaction timeout, instead of rebuilding the client and rejoining the
// group once per failed try.
func (a *App) initProducer(ctx context.Context, cl *kgo.Client) error {
	limit := a.cfg.TransactionTimeout
	if limit <= 0 {
		limit = time.Minute
	}
	deadline := time.Now().Add(limit)
	for fails := 1; ; fails++ {
		_, _, err := cl.ProducerID(ctx)
		if err == nil {
			return nil
		}
		if !brokerFailover(err) || time.Now().After(deadline) {
			return fmt.Errorf("stage: init producer: %w", err)
		}
		a.log.Debug("stage: init producer failed during a broker failover; retrying", "err", err)
		if err := wait.Sleep(ctx, kclient.Backoff(fails)); err != nil {
			return err
		}
	}
}
