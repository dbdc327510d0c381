package stage

import (
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/kclient"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Every client the runtime builds starts from the failover defaults, and
// the user's ClientOpts override them.
func TestClientOptsDefaultsAndOverride(t *testing.T) {
	hb := (*kmsg.HeartbeatRequest)(nil).Key()
	for _, tc := range []struct {
		name      string
		user      []kgo.Opt
		minAge    time.Duration
		retries   int64
		hbTimeout time.Duration
		fetchWait time.Duration
	}{
		{"defaults", nil, kclient.MetadataMinAge, kclient.RequestRetries, kclient.HeartbeatRetryTimeout, fetchMaxWait},
		{"user overrides", []kgo.Opt{kgo.MetadataMinAge(3 * time.Second), kgo.RequestRetries(5), kgo.RetryTimeout(7 * time.Second), kgo.FetchMaxWait(2 * time.Second)},
			3 * time.Second, 5, 7 * time.Second, 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &App{cfg: Config{Brokers: []string{"127.0.0.1:1"}, SessionTimeout: 6 * time.Second, ClientOpts: tc.user}}
			cl, err := kgo.NewClient(a.baseOpts()...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if got := cl.OptValue(kgo.MetadataMinAge); got != tc.minAge {
				t.Errorf("MetadataMinAge = %v, want %v", got, tc.minAge)
			}
			if got := cl.OptValue(kgo.FetchMaxWait); got != tc.fetchWait {
				t.Errorf("FetchMaxWait = %v, want %v", got, tc.fetchWait)
			}
			if got := cl.OptValue(kgo.RequestRetries); got != tc.retries {
				t.Errorf("RequestRetries = %v, want %v", got, tc.retries)
			}
			fn, _ := cl.OptValue(kgo.RetryTimeoutFn).(func(int16) time.Duration)
			if fn == nil {
				t.Fatalf("RetryTimeoutFn = %T", cl.OptValue(kgo.RetryTimeoutFn))
			}
			if got := fn(hb); got != tc.hbTimeout {
				t.Errorf("heartbeat retry timeout = %v, want %v", got, tc.hbTimeout)
			}
		})
	}
}
