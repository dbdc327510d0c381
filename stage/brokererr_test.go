package stage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestBrokerFailover(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &net.AddrError{Err: "x"}}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"dial refused, wrapped twice", fmt.Errorf("init: %w", fmt.Errorf("unable to dial: %w", refused)), true},
		{"connection reset", reset, true},
		{"not coordinator", fmt.Errorf("x: %w", kerr.NotCoordinator), true},
		{"coordinator loading", kerr.CoordinatorLoadInProgress, true},
		{"coordinator not available", kerr.CoordinatorNotAvailable, true},
		{"fenced", kerr.ProducerFenced, false},
		{"unauthorized", kerr.TransactionalIDAuthorizationFailed, false},
		{"invalid timeout", kerr.InvalidTransactionTimeout, false},
		{"canceled", context.Canceled, false},
		{"deadline", fmt.Errorf("x: %w", context.DeadlineExceeded), false},
		{"other", errors.New("boom"), false},
	} {
		if got := brokerFailover(tc.err); got != tc.want {
			t.Errorf("%s: brokerFailover(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

func TestOffsetCommitAborted(t *testing.T) {
	refused := fmt.Errorf("unable to dial: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"offsets refused by a dead coordinator", fmt.Errorf(offsetCommitErrPrefix+"%w", errors.Join(refused)), true},
		{"offsets: connection closed", fmt.Errorf(offsetCommitErrPrefix+"%w", errors.Join(io.EOF)), true},
		{"offsets: fenced", fmt.Errorf(offsetCommitErrPrefix+"%w", errors.Join(kerr.ProducerFenced)), false},
		{"EndTxn failed: outcome unknown", refused, false},
		{"nil", nil, false},
	} {
		if got := offsetCommitAborted(tc.err); got != tc.want {
			t.Errorf("%s: offsetCommitAborted(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
