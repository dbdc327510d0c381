package stage

import (
	"context"

	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kgo"
)

// prefetch reads the committed fold state of a fetch's keys from the file
// into the store's cache in batched queries before the records are fed: a
// point read per new key cost more than the rest of the record's work in a
// large state (docs/performance.md, "State store"). Keys the
// step already holds are skipped: their reads never reach the file. Keys
// of the unwritten committed steps are not looked up here: in a large
// state that lookup misses every time, in a map of tens of thousands of
// keys, and the store skips such a key anyway when it is cached (a hot
// key) or new (the key filter rules it out until it is written). The
// cache holds the file's committed values only, and a read consults the
// unwritten steps before it, so a prefetch changes what a read costs,
// never what it returns.
func (t *task) prefetch(ctx context.Context, id headers.TopicID, recs []*kgo.Record) error {
	b := t.byID[id]
	if b == nil || !b.fold || b.tick || t.store.batch == nil || len(recs) < 2 {
		return nil
	}
	keys := t.readKeys[:0]
	for _, r := range recs {
		if r.Attrs.IsControl() {
			continue
		}
		k := t.foldKeys.of(r.Key)
		if _, ok := t.store.batch.Staged(k); ok {
			continue
		}
		keys = append(keys, k)
	}
	defer func() {
		clear(keys) // keep no key strings alive past the fetch
		t.readKeys = keys[:0]
	}()
	if len(keys) < 2 {
		return nil
	}
	return t.store.kv.Prefetch(ctx, keys)
}
