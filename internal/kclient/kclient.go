// Package kclient holds the franz-go options every Kafka client the library
// builds starts from, chosen so that a client follows a partition leader or
// a coordinator to its new broker as soon as the cluster has moved it.
//
// franz-go's defaults trade failover time for fewer requests: it refreshes
// metadata at most every 5 s (MetadataMinAge), so a client that asked just
// before the cluster moved a leader learns of the move up to 5 s late, and
// it backs a failed request off exponentially from 250 ms to 5 s
// (RetryBackoffFn), so a request retried through a broker outage of the
// KRaft default 9 s is next tried up to 5 s after the cluster recovered.
// Both cost a client only a few small requests a second while something is
// failing, and nothing while nothing is. The failover soak
// (internal/rig/failover) measures the difference; docs/performance.md,
// "Real Kafka: broker failover", records it. Options cannot keep a dead
// broker out of a client's seed list; Seeds does, once attached to the
// client.
//
// Options a user passes after these override them: franz-go applies options
// in order and the last one wins.
package kclient

import (
	"math/rand/v2"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	// MetadataMinAge is how soon after one metadata refresh a client may
	// refresh again when a request fails (franz-go: 5 s). The Java client
	// refreshes after retry.backoff.ms, 100 ms by default.
	MetadataMinAge = 100 * time.Millisecond

	// MinBackoff and MaxBackoff bound the pause before a failed request is
	// retried (franz-go: 250 ms doubling to 5 s). The pause doubles from
	// MinBackoff and stays at MaxBackoff, so a request retried through an
	// outage goes out again at most MaxBackoff after the cluster recovered.
	MinBackoff = 100 * time.Millisecond
	MaxBackoff = 250 * time.Millisecond

	// RequestRetries is how many times a request is tried (franz-go: 20).
	// At MaxBackoff, 20 tries last 5 s, less than a broker outage: with
	// 200, the retry timeout (30 s for most requests) is what ends a
	// retried request, as it is with franz-go's defaults.
	RequestRetries = 200

	// HeartbeatRetryTimeout is the least time a group member retries a
	// heartbeat before it gives its partitions up (franz-go: the session
	// timeout). A killed coordinator is unreachable until the controller
	// fences its broker (broker.session.timeout.ms, 9 s by default) and
	// another broker loads the group, and the new coordinator starts every
	// member's session afresh; a member that gave up at a shorter session
	// timeout loses and rejoins what it would have kept.
	HeartbeatRetryTimeout = 30 * time.Second
)

// Backoff is the retry backoff: MinBackoff doubling to MaxBackoff, with
// ±20% jitter so that clients retrying the same outage spread out.
func Backoff(fails int) time.Duration {
	d := MinBackoff
	for i := 1; i < fails && d < MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, MaxBackoff)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// RetryTimeout is the retry timeout of a request with the given key: at
// least HeartbeatRetryTimeout for a heartbeat, otherwise franz-go's default
// (the session timeout for joins and syncs, 30 s for the rest). session is
// the client's group session timeout, 0 for franz-go's default 45 s.
func RetryTimeout(session time.Duration) func(int16) time.Duration {
	if session <= 0 {
		session = 45 * time.Second
	}
	return func(key int16) time.Duration {
		switch key {
		case (*kmsg.HeartbeatRequest)(nil).Key(), (*kmsg.ConsumerGroupHeartbeatRequest)(nil).Key():
			return max(session, HeartbeatRetryTimeout)
		case (*kmsg.JoinGroupRequest)(nil).Key(), (*kmsg.SyncGroupRequest)(nil).Key():
			return session
		}
		return 30 * time.Second
	}
}

// Opts returns the options for any client. Put them before the user's.
func Opts() []kgo.Opt {
	return []kgo.Opt{
		kgo.MetadataMinAge(MetadataMinAge),
		kgo.RetryBackoffFn(Backoff),
		kgo.RequestRetries(RequestRetries),
	}
}

// GroupOpts returns the options for a group member whose session timeout
// is session (0 for franz-go's default): Opts, and heartbeats retried for
// at least HeartbeatRetryTimeout.
func GroupOpts(session time.Duration) []kgo.Opt {
	return append(Opts(), kgo.RetryTimeoutFn(RetryTimeout(session)))
}
