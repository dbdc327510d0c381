package observer

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// TestRetryRetriable: a shard waits out the errors a broker gives while
// metadata spreads (retriable ones) and fails at once on any other, or
// when its context ends.
func TestRetryRetriable(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	errOther := errors.New("not a broker error")
	for _, tc := range []struct {
		name      string
		errs      []error // what each try returns; nil after the last
		cancel    bool
		wantTries int
		wantErr   error
	}{
		{"succeeds at once", nil, false, 1, nil},
		{"waits out retriable errors", []error{kerr.UnknownTopicOrPartition, kerr.NotLeaderForPartition}, false, 3, nil},
		{"fails at once on a non-retriable broker error", []error{kerr.TopicAuthorizationFailed}, false, 1, kerr.TopicAuthorizationFailed},
		{"fails at once on any other error", []error{errOther}, false, 1, errOther},
		{"gives up when its context ends", []error{kerr.UnknownTopicOrPartition, kerr.UnknownTopicOrPartition}, true, 1, kerr.UnknownTopicOrPartition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			tries := 0
			err := retryRetriable(ctx, log, "test", func() error {
				tries++
				if tc.cancel {
					cancel()
				}
				if tries <= len(tc.errs) {
					return tc.errs[tries-1]
				}
				return nil
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
			if tries != tc.wantTries {
				t.Errorf("%d tries, want %d", tries, tc.wantTries)
			}
		})
	}
}
