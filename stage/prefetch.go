package stage

import (
	"context"

	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kgo"
)

// prefetch reads the committed fold state of a fetch's keys from the file
// into the store's cache in batched queries before the records are fed: a
// point read per new key cost more than the rest of the record's work in a
// large state (docs/performance.md, "Cost flat in state size"). Keys the
// step or the unwritten committed steps already hold are skipped: their
// reads never reach the file. The cache holds committed values only, so a
// prefetch changes what a read costs, never what it returns.
func (t *task) prefetch(ctx context.Context, id headers.TopicID, recs []*kgo.Record) error {
	b := t.byID[id]
	if b == nil || !b.fold || b.tick || t.batch == nil || len(recs) < 2 {
		return nil
	}
	p := t.unwritten()
	keys := t.readKeys[:0]
	for _, r := range recs {
		if r.Attrs.IsControl() {
			continue
		}
		k := t.foldKeys.of(r.Key)
		if _, ok := t.batch.Staged(k); ok {
			continue
		}
		if _, ok := p.Staged(k); ok {
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
	return t.kv.Prefetch(ctx, keys)
}
