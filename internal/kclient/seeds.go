package kclient

import (
	"context"
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Seeds keeps a broker that refused a connection out of a client's seed
// list until it accepts one again.
//
// franz-go sends a request that any broker may answer — a coordinator
// lookup, a metadata refresh — to its discovered brokers in turn and, once
// per round, to a seed address. The seed addresses never change, so while a
// broker is down one of them is that broker's. A coordinator lookup that
// fails to dial is not retried (franz-go v1.22: dial errors are not
// retryable there), so the request waiting on it fails: a heartbeat, a
// TxnOffsetCommit, an EndTxn whose outcome is then unknown and which costs
// the stage a client rebuild and a restore. With Seeds the dead broker's
// address leaves the seed list at the first refused connection to it, by
// any of the client's connections (seed or discovered broker at the same
// address), and returns at the first accepted one; the list is never
// emptied: when every seed has been refused, all of them are put back.
//
// A Seeds serves one client. Pass Opt to the client's options and Attach
// the client once built; connections made before Attach are remembered and
// applied then. NewClient does both.
type Seeds struct {
	mu      sync.Mutex
	cl      *kgo.Client
	seeds   []string        // the configured seeds, in order; nil before Attach
	down    map[string]bool // host:port → last connection refused
	applied []string        // the seeds last given to the client
}

// NewClient is kgo.NewClient with a Seeds attached.
func NewClient(opts ...kgo.Opt) (*kgo.Client, error) {
	s := new(Seeds)
	cl, err := kgo.NewClient(append(slices.Clip(opts), s.Opt())...)
	if err != nil {
		return nil, err
	}
	s.Attach(cl)
	return cl, nil
}

// Opt returns the option that installs s's hook.
func (s *Seeds) Opt() kgo.Opt { return kgo.WithHooks(s) }

// Attach gives s the client whose seeds it keeps, read from the client's
// SeedBrokers option. A second Attach is ignored.
func (s *Seeds) Attach(cl *kgo.Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cl != nil {
		return
	}
	seeds, _ := cl.OptValue(kgo.SeedBrokers).([]string)
	s.cl, s.seeds, s.applied = cl, slices.Clone(seeds), slices.Clone(seeds)
	s.update()
}

// Live returns the seeds the client currently has; before Attach, nil.
func (s *Seeds) Live() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.applied)
}

var _ kgo.HookBrokerConnect = (*Seeds)(nil)

// OnBrokerConnect implements kgo.HookBrokerConnect: a dial that failed
// marks the address down, a connection that opened marks it up. A dial
// that ended with its request's context, or a connection that opened and
// then failed its handshake (SASL, TLS, ApiVersions), says nothing of
// whether the broker is up.
func (s *Seeds) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, conn net.Conn, err error) {
	var down bool
	switch {
	case err == nil && conn != nil:
	case err != nil && conn == nil && !errors.Is(err, context.Canceled) &&
		!errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, kgo.ErrClientClosed):
		down = true
	default:
		return
	}
	addr := net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port)))
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down[addr] == down {
		return // not down and not known down: nothing changes
	}
	if down {
		if s.down == nil {
			s.down = make(map[string]bool)
		}
		s.down[addr] = true
	} else {
		delete(s.down, addr)
	}
	s.update()
}

// update gives the client the seeds not down, or all of them if every one
// is. Called with s.mu held, which orders concurrent updates.
func (s *Seeds) update() {
	if s.cl == nil {
		return
	}
	live := make([]string, 0, len(s.seeds))
	for _, seed := range s.seeds {
		if !s.down[seedAddr(seed)] {
			live = append(live, seed)
		}
	}
	if len(live) == 0 {
		live = s.seeds
	}
	if slices.Equal(live, s.applied) {
		return
	}
	// Only parse errors fail, and the client parsed these seeds already.
	if err := s.cl.UpdateSeedBrokers(live...); err == nil {
		s.applied = slices.Clone(live)
	}
}

// seedAddr is seed as host:port, the way franz-go reads a seed (port 9092
// if none), so that it compares with a connected broker's address.
func seedAddr(seed string) string {
	const defaultPort = "9092"
	if rest, ok := strings.CutPrefix(seed, "["); ok { // bracketed IPv6
		host, port, _ := strings.Cut(rest, "]")
		if port = strings.TrimPrefix(port, ":"); port == "" {
			port = defaultPort
		}
		return net.JoinHostPort(host, port)
	}
	if !strings.Contains(seed, ":") {
		return net.JoinHostPort(seed, defaultPort)
	}
	host, port, err := net.SplitHostPort(seed)
	if err != nil {
		return net.JoinHostPort(seed, defaultPort) // an IPv6 literal
	}
	return net.JoinHostPort(host, port)
}
