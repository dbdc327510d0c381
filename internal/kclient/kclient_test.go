package kclient

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestBackoff(t *testing.T) {
	for _, tc := range []struct {
		fails int
		base  time.Duration // before jitter
	}{
		{0, MinBackoff},
		{1, MinBackoff},
		{2, 2 * MinBackoff},
		{3, MaxBackoff},
		{10, MaxBackoff},
		{1 << 20, MaxBackoff},
	} {
		lo, hi := time.Duration(float64(tc.base)*0.8), time.Duration(float64(tc.base)*1.2)
		for range 100 {
			if d := Backoff(tc.fails); d < lo || d > hi {
				t.Fatalf("Backoff(%d) = %v, want within [%v, %v]", tc.fails, d, lo, hi)
			}
		}
	}
}

func TestRetryTimeout(t *testing.T) {
	hb := (*kmsg.HeartbeatRequest)(nil).Key()
	join := (*kmsg.JoinGroupRequest)(nil).Key()
	endTxn := (*kmsg.EndTxnRequest)(nil).Key()
	for _, tc := range []struct {
		session time.Duration
		key     int16
		want    time.Duration
	}{
		{6 * time.Second, hb, HeartbeatRetryTimeout},
		{0, hb, 45 * time.Second}, // franz-go's default session outlasts the floor
		{time.Minute, hb, time.Minute},
		{6 * time.Second, join, 6 * time.Second},
		{0, join, 45 * time.Second},
		{6 * time.Second, endTxn, 30 * time.Second},
	} {
		if got := RetryTimeout(tc.session)(tc.key); got != tc.want {
			t.Errorf("RetryTimeout(%v)(%s) = %v, want %v", tc.session, kmsg.NameForKey(tc.key), got, tc.want)
		}
	}
}

// The defaults reach the client, and options after them win.
func TestOptsOverridable(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []kgo.Opt
		minAge  time.Duration
		retries int64
	}{
		{"defaults", GroupOpts(6 * time.Second), MetadataMinAge, RequestRetries},
		{"user after", append(Opts(), kgo.MetadataMinAge(2*time.Second), kgo.RequestRetries(3)), 2 * time.Second, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := kgo.NewClient(tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if got := cl.OptValue(kgo.MetadataMinAge); got != tc.minAge {
				t.Errorf("MetadataMinAge = %v, want %v", got, tc.minAge)
			}
			if got := cl.OptValue(kgo.RequestRetries); got != tc.retries {
				t.Errorf("RequestRetries = %v, want %v", got, tc.retries)
			}
		})
	}
}
