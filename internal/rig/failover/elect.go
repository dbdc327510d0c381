package failover

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A movedCheck asks one surviving broker whether what a fault took from
// broker gone has a new home: a partition a new leader, a transactional ID
// or a group a new coordinator, or the broker no leadership at all.
type movedCheck func(ctx context.Context, b *kgo.Broker, gone int32) (bool, error)

// leaderMoved: the broker names a live leader other than gone for
// topic's partition.
func leaderMoved(topic string, partition int32) movedCheck {
	return func(ctx context.Context, b *kgo.Broker, gone int32) (bool, error) {
		req := kmsg.NewPtrMetadataRequest()
		t := kmsg.NewMetadataRequestTopic()
		t.Topic = kmsg.StringPtr(topic)
		req.Topics = append(req.Topics, t)
		resp, err := req.RequestWith(ctx, b)
		if err != nil {
			return false, err
		}
		for _, rt := range resp.Topics {
			for _, p := range rt.Partitions {
				if p.Partition == partition {
					return p.ErrorCode == 0 && p.Leader >= 0 && p.Leader != gone, nil
				}
			}
		}
		return false, fmt.Errorf("failover: %s[%d] missing from metadata", topic, partition)
	}
}

// allMoved: the broker's metadata, internal topics included, names gone
// as the leader of no partition.
func allMoved(ctx context.Context, b *kgo.Broker, gone int32) (bool, error) {
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(ctx, b) // nil topics: all of them
	if err != nil {
		return false, err
	}
	for _, rt := range resp.Topics {
		for _, p := range rt.Partitions {
			if p.Leader == gone || p.Leader < 0 {
				return false, nil
			}
		}
	}
	return true, nil
}

// coordinatorMoved: the broker answers FindCoordinator for key with a node
// other than gone.
func coordinatorMoved(typ int8, key string) movedCheck {
	return func(ctx context.Context, b *kgo.Broker, gone int32) (bool, error) {
		req := kmsg.NewPtrFindCoordinatorRequest()
		req.CoordinatorType = typ
		req.CoordinatorKey = key
		req.CoordinatorKeys = []string{key}
		resp, err := req.RequestWith(ctx, b)
		if err != nil {
			return false, err
		}
		node, code := resp.NodeID, resp.ErrorCode
		if len(resp.Coordinators) > 0 {
			node, code = resp.Coordinators[0].NodeID, resp.Coordinators[0].ErrorCode
		}
		if err := kerr.ErrorForCode(code); err != nil {
			return false, nil // COORDINATOR_NOT_AVAILABLE while it loads
		}
		return node != gone, nil
	}
}

// watchMoved polls every broker in survivors with check, each on its own
// goroutine every 20 ms, and returns when the first of them says it has
// moved, or the zero time if ctx ends first. A client can learn the move
// from any broker, so the first answer is the cluster's.
func watchMoved(ctx context.Context, cl *kgo.Client, survivors []int32, gone int32, check movedCheck) time.Time {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu    sync.Mutex
		first time.Time
		wg    sync.WaitGroup
	)
	for _, id := range survivors {
		b := cl.Broker(int(id))
		wg.Go(func() {
			for ctx.Err() == nil {
				rctx, rcancel := context.WithTimeout(ctx, time.Second)
				ok, err := check(rctx, b, gone)
				rcancel()
				if err == nil && ok {
					// The answer arrived now; when the broker learned it
					// is at most one poll and one round trip earlier.
					now := time.Now()
					mu.Lock()
					if first.IsZero() || now.Before(first) {
						first = now
					}
					mu.Unlock()
					cancel()
					return
				}
				select {
				case <-ctx.Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		})
	}
	wg.Wait()
	return first
}
