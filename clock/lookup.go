package clock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/parsley-go/parsley/headers"
)

// A TopicIDLookup asks a cluster for the current ID of the named topic,
// through whatever admin API the caller's client library has. It is what a
// Resolver calls on a cache miss, so a clock can run without a franz-go
// client.
//
// A topic the cluster does not know must be reported as an error wrapping
// ErrUnknownTopic (an *UnknownTopicError is best): the resolver caches that
// answer as "gone", and Stamp refuses records for the topic. Any other error
// is a failed lookup that tells nothing about the topic. A lookup must never
// return the zero ID without an error; the resolver turns that into an
// error wrapping ErrNoTopicID.
type TopicIDLookup func(ctx context.Context, topic string) (headers.TopicID, error)

// NewLookupResolver returns a resolver that asks lookup and trusts an
// answer for maxAge; maxAge ≤ 0 means DefaultTopicIDMaxAge. Its cache,
// Forget and Refresh behave as those of a resolver made by NewResolver.
func NewLookupResolver(lookup TopicIDLookup, maxAge time.Duration) *Resolver {
	if maxAge <= 0 {
		maxAge = DefaultTopicIDMaxAge
	}
	return &Resolver{find: lookup, maxAge: maxAge, ids: make(map[string]cachedID)}
}

// TopicIDs sets where the clock's topic IDs come from: lookup, instead of
// the admin client given to New, which may then be nil. It is ignored with
// SharedResolver.
func TopicIDs(lookup TopicIDLookup) Option {
	return func(c *config) { c.lookup = lookup }
}

// lookup calls the resolver's TopicIDLookup and holds it to its contract,
// so a careless lookup cannot put the zero ID or an unnamed error into the
// cache.
func (r *Resolver) lookup(ctx context.Context, topic string) (headers.TopicID, error) {
	if topic == "" {
		return headers.TopicID{}, &UnknownTopicError{Topic: topic}
	}
	if r.find == nil {
		return headers.TopicID{}, fmt.Errorf("clock: resolve topic %q: no topic ID lookup", topic)
	}
	id, err := r.find(ctx, topic)
	switch {
	case errors.Is(err, ErrUnknownTopic):
		var ute *UnknownTopicError
		if errors.As(err, &ute) && ute.Topic == topic {
			return headers.TopicID{}, err
		}
		return headers.TopicID{}, &UnknownTopicError{Topic: topic, Broker: err}
	case err != nil:
		return headers.TopicID{}, fmt.Errorf("clock: resolve topic %q: %w", topic, err)
	case id.IsZero():
		return headers.TopicID{}, fmt.Errorf("clock: resolve topic %q: %w", topic, ErrNoTopicID)
	}
	return id, nil
}
