package stage

// The protocol's view of broker offsets (end offsets and log starts) by
// topic ID.

import (
	"context"
	"fmt"

	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kadm"
)

// brokerOffsets implements protocol.BrokerOffsets with the App's admin
// client and the topic names the startup checks resolved.
type brokerOffsets struct {
	admin cluster
	names map[headers.TopicID]string // read-only after the startup checks
}

func (b brokerOffsets) EndOffsets(ctx context.Context, id headers.TopicID) ([]int64, bool, error) {
	return b.list(ctx, id, b.admin.ListEndOffsets)
}

func (b brokerOffsets) LogStarts(ctx context.Context, id headers.TopicID) ([]int64, bool, error) {
	return b.list(ctx, id, b.admin.ListStartOffsets)
}

func (b brokerOffsets) list(ctx context.Context, id headers.TopicID, list func(context.Context, ...string) (kadm.ListedOffsets, error)) ([]int64, bool, error) {
	name, ok := b.names[id]
	if !ok {
		// A former sink: look it up among all topics.
		md, err := b.admin.Metadata(ctx)
		if err != nil {
			return nil, false, err
		}
		for n, td := range md.Topics {
			if headers.TopicID(td.ID) == id {
				name, ok = n, true
			}
		}
		if !ok {
			return nil, false, nil
		}
	}
	l, err := list(ctx, name)
	if err != nil {
		return nil, false, err
	}
	if err := l.Error(); err != nil {
		return nil, false, fmt.Errorf("list offsets of %s: %w", name, err)
	}
	ps := l[name]
	out := make([]int64, len(ps))
	for p, o := range ps {
		if int(p) < len(out) {
			out[p] = o.Offset
		}
	}
	return out, true, nil
}
