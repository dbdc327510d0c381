package bridge

import (
	"testing"
	"time"
)

// TestConfigBackoffsAreSeparate holds that the two pauses have one field
// each: the step retry pause (RetryBackoff, the stage's) and the NATS
// connect pause (SinkConfig.ConnectBackoff) default independently and
// setting one leaves the other alone.
func TestConfigBackoffsAreSeparate(t *testing.T) {
	for _, tc := range []struct {
		name                string
		retry, connect      time.Duration
		wantRetry, wantConn time.Duration
	}{
		{"defaults", 0, 0, 100 * time.Millisecond, 100 * time.Millisecond},
		{"retry only", 3 * time.Second, 0, 3 * time.Second, 100 * time.Millisecond},
		{"connect only", 0, 7 * time.Millisecond, 100 * time.Millisecond, 7 * time.Millisecond},
		{"both", 2 * time.Second, 9 * time.Millisecond, 2 * time.Second, 9 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{RetryBackoff: tc.retry, SinkConfig: SinkConfig{ConnectBackoff: tc.connect}}.withDefaults()
			if c.RetryBackoff != tc.wantRetry || c.ConnectBackoff != tc.wantConn {
				t.Fatalf("RetryBackoff %v ConnectBackoff %v, want %v and %v", c.RetryBackoff, c.ConnectBackoff, tc.wantRetry, tc.wantConn)
			}
		})
	}
}
