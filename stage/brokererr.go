package stage

// Which client errors a broker failover produces and a retry on the same
// client outlives.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/parsley-go/parsley/internal/kclient"
	"github.com/twmb/franz-go/pkg/kerr"
)

// brokerFailover reports whether err is what a broker that died or moved
// a leadership or coordinator away answers with: a connection refused,
// reset or closed, or a retriable Kafka error (NOT_COORDINATOR,
// COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS, ...). A
// context's end is not one: the caller is stopping.
func brokerFailover(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if ke := (*kerr.Error)(nil); errors.As(err, &ke) {
		return ke.Retriable
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return true // the broker closed the connection mid-request
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
func (a *App) initProducer(ctx context.Context, sess groupSession) error {
	deadline := time.Now().Add(a.cfg.TransactionTimeout)
	for fails := 1; ; fails++ {
		err := sess.InitProducer(ctx)
		if err == nil {
			return nil
		}
		if !brokerFailover(err) || time.Now().After(deadline) {
			return fmt.Errorf("stage: init producer: %w", err)
		}
		a.log.Debug("stage: init producer failed during a broker failover; retrying", "err", err)
		if err := a.sleep(ctx, kclient.Backoff(fails)); err != nil {
			return err
		}
	}
}

// offsetCommitAborted reports whether err, from GroupTransactSession.End,
// says that committing the step's offsets failed during a broker failover
// and the transaction was then aborted, the abort acknowledged by the
// transaction coordinator. franz-go's End (txn.go, v1.22) returns the
// offset commit's error, which it prefixes so, only when its EndTxn
// succeeded, and it never tries to commit after a failed offset commit;
// an EndTxn failure, whose outcome is unknown, returns EndTxn's own error
// instead. The step's outcome is therefore known, aborted, and the client,
// its producer ID and its group membership are intact: the step is run
// again from committed state on the same client, as after any abort,
// rather than rebuilding the client, rejoining and restoring every task.
// TestOffsetCommitAborted pins the message.
func offsetCommitAborted(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), offsetCommitErrPrefix) && brokerFailover(err)
}

const offsetCommitErrPrefix = "unable to commit transaction offsets: "
