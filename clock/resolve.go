package clock

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

// ErrUnknownTopic is wrapped when a topic name does not resolve to a topic
// on the cluster.
var ErrUnknownTopic = errors.New("unknown topic")

// ErrNoTopicID is wrapped when the cluster names a topic but gives it no
// ID (brokers older than Kafka 2.8). Channels are identified by topic ID, so
// such a cluster cannot carry causal claims.
var ErrNoTopicID = errors.New("cluster returned no topic ID")

// UnknownTopicError names a topic that does not exist on the cluster. It
// wraps ErrUnknownTopic and, when the broker said so, the broker's error
// (kerr.UnknownTopicOrPartition).
type UnknownTopicError struct {
	Topic  string
	Broker error // the broker's error, if any
}

func (e *UnknownTopicError) Error() string {
	return "clock: topic " + strconv.Quote(e.Topic) + " does not exist"
}

// Unwrap returns ErrUnknownTopic and the broker's error.
func (e *UnknownTopicError) Unwrap() []error {
	if e.Broker == nil {
		return []error{ErrUnknownTopic}
	}
	return []error{ErrUnknownTopic, e.Broker}
}

// DefaultTopicIDMaxAge is how long a Resolver trusts a cached topic ID
// before asking the cluster again.
const DefaultTopicIDMaxAge = 30 * time.Second

// A Resolver maps topic names to topic IDs through the admin API and caches
// the answers. It is safe for concurrent use, and several Clocks may share
// one.
//
// A channel is a partition of one topic incarnation: a topic deleted and
// recreated under the same name has a new ID and is a different channel.
// The resolver learns a new incarnation when a cached ID expires, when the
// caller reports that the old ID has gone (Forget, which a Clock's produce
// promise calls on UNKNOWN_TOPIC_ID and UNKNOWN_TOPIC_OR_PARTITION), or on
// Refresh. Learning it changes only what later lookups return: claims
// already folded into a clock keep naming the incarnation they were made
// on.
//
// Lookups bypass franz-go's metadata cache, which would otherwise answer
// with the old ID for up to the client's MetadataMinAge (5s by default)
// after a recreation. (franz-go's producer itself does not follow a
// recreation: it keeps failing sends with UNKNOWN_TOPIC_ID until the topic
// is purged from the client with PurgeTopicsFromClient.)
//
// One window remains: a send acknowledged on a new incarnation while the
// resolver still holds a fresh answer naming the old one is folded under
// the old ID. It needs the topic deleted, recreated and written again
// within the max age, with no produce error reported in between; lower the
// max age where topics are recreated under live producers.
type Resolver struct {
	find   TopicIDLookup
	maxAge time.Duration

	mu  sync.RWMutex
	ids map[string]cachedID
}

// cachedID is the resolver's latest word on a topic: its ID, or that it is
// gone (unknown to the cluster, or forgotten). at is when the lookup that
// produced it started, so a slow lookup cannot overwrite a newer answer.
type cachedID struct {
	id   headers.TopicID
	at   time.Time
	gone bool
}

// NewResolver returns a resolver that asks admin and trusts an answer for
// maxAge; maxAge ≤ 0 means DefaultTopicIDMaxAge.
func NewResolver(admin *kadm.Client, maxAge time.Duration) *Resolver {
	return NewLookupResolver(AdminLookup(admin), maxAge)
}

// TopicID returns the ID of the named topic, from the cache when the cached
// answer is younger than the resolver's max age. An unknown topic is an
// *UnknownTopicError; the zero ID is never returned without an error.
func (r *Resolver) TopicID(ctx context.Context, topic string) (headers.TopicID, error) {
	if id, ok := r.fresh(topic); ok {
		return id, nil
	}
	return r.Refresh(ctx, topic)
}

// fresh returns the cached ID of topic if it is younger than the max age.
func (r *Resolver) fresh(topic string) (headers.TopicID, bool) {
	r.mu.RLock()
	e, ok := r.ids[topic]
	r.mu.RUnlock()
	if ok && !e.gone && time.Since(e.at) < r.maxAge {
		return e.id, true
	}
	return headers.TopicID{}, false
}

// Cached returns the cached ID of the named topic, however old, without
// asking the cluster.
func (r *Resolver) Cached(topic string) (headers.TopicID, bool) {
	r.mu.RLock()
	e, ok := r.ids[topic]
	r.mu.RUnlock()
	return e.id, ok && !e.gone
}

// Forget drops the cached ID of the named topic, so the next lookup asks
// the cluster.
func (r *Resolver) Forget(topic string) {
	r.mu.Lock()
	r.ids[topic] = cachedID{at: time.Now(), gone: true}
	r.mu.Unlock()
}

// Refresh asks the cluster for the named topic's current ID, caches it and
// returns it. An unknown topic is an *UnknownTopicError and drops the cached
// ID.
func (r *Resolver) Refresh(ctx context.Context, topic string) (headers.TopicID, error) {
	start := time.Now()
	id, err := r.lookup(ctx, topic)
	if err != nil && !errors.Is(err, ErrUnknownTopic) {
		return headers.TopicID{}, err // no news about the topic
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// A lookup or Forget that started after this one has newer news; keep it.
	if cur, ok := r.ids[topic]; !ok || !cur.at.After(start) {
		r.ids[topic] = cachedID{id: id, at: start, gone: err != nil}
	}
	return id, err
}

// AdminLookup returns the TopicIDLookup that asks the cluster through a
// franz-go admin client. A nil admin fails every lookup.
func AdminLookup(admin *kadm.Client) TopicIDLookup {
	return func(ctx context.Context, topic string) (headers.TopicID, error) {
		return adminLookup(ctx, admin, topic)
	}
}

// errNoAdmin fails every lookup of a resolver made without an admin client.
var errNoAdmin = errors.New("no admin client")

func adminLookup(ctx context.Context, admin *kadm.Client, topic string) (headers.TopicID, error) {
	if admin == nil {
		return headers.TopicID{}, errNoAdmin
	}
	// kadm answers Metadata from the client's cache unless authorized
	// operations are requested; asking for them is how we reach the
	// brokers, so a recreated topic is seen at once.
	md, err := admin.Metadata(kadm.WithAuthorizedOps(ctx), topic)
	if err != nil {
		return headers.TopicID{}, err
	}
	td, ok := md.Topics[topic]
	if !ok {
		return headers.TopicID{}, &UnknownTopicError{Topic: topic}
	}
	switch {
	case errors.Is(td.Err, kerr.UnknownTopicOrPartition), errors.Is(td.Err, kerr.UnknownTopicID):
		return headers.TopicID{}, &UnknownTopicError{Topic: topic, Broker: td.Err}
	case td.Err != nil:
		return headers.TopicID{}, td.Err
	}
	return headers.TopicID(td.ID), nil
}
