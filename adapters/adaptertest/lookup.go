package adaptertest

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
)

// ErrInjected is the error of the lookups FailLookupsAfter fails.
var ErrInjected = errors.New("adaptertest: injected lookup failure")

// FailLookupsAfter answers the first n lookups through lookup and fails
// every later one with ErrInjected. With clock.TopicIDMaxAge(time.Nanosecond)
// every resolve asks the lookup, so n = 1 lets a send's stamp resolve its
// topic and makes the fold of its acknowledgement fail: the injected fold
// failure every adapter's send helper must report at the call site.
func FailLookupsAfter(n int32, lookup clock.TopicIDLookup) clock.TopicIDLookup {
	var calls atomic.Int32
	return func(ctx context.Context, topic string) (headers.TopicID, error) {
		if calls.Add(1) > n {
			return headers.TopicID{}, ErrInjected
		}
		return lookup(ctx, topic)
	}
}
