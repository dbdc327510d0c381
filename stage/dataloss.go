package stage

// Broker data loss: telling a source partition that lost committed records
// apart from a bug in the feed, and stopping with an error the operator can
// act on instead of letting the client rewind.

import (
	"context"
	"errors"
	"fmt"

	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ErrDataLoss: the brokers lost records of a source partition that the
// application had already consumed and committed (an unclean leader
// election, a topic restored from an older backup). Run stops with a
// *DataLossError rather than reprocess or skip silently.
var ErrDataLoss = errors.New("broker lost committed records")

// DataLossError names a source partition whose log no longer holds what
// the application consumed: the group committed (or the client had
// consumed to) Consumed, but the partition now ends at LogEnd. Everything
// from LogEnd up to Consumed is gone from the brokers, and records written
// there from now on would reuse offsets the stages already processed.
type DataLossError struct {
	Group     string // the consumer group, the ApplicationID
	Topic     string
	Partition int32
	Consumed  int64 // the committed offset, or where the client had consumed to
	LogEnd    int64 // the partition's end offset now; -1 when unknown
	Err       error // the client's report, when it detected the loss; else nil
}

func (e *DataLossError) Error() string {
	end := "an earlier offset"
	if e.LogEnd >= 0 {
		end = fmt.Sprintf("offset %d", e.LogEnd)
	}
	s := fmt.Sprintf("%v: %s[%d]: the application consumed to offset %d but the partition now ends at %s; "+
		"the client would rewind and reprocess (or skip) records silently, so the application stops. "+
		"Restore the topic from a backup, or accept the loss: reset group %q on %s:%d to the log end "+
		"(kafka-consumer-groups --reset-offsets --to-latest) and restart",
		ErrDataLoss, e.Topic, e.Partition, e.Consumed, end, e.Group, e.Topic, e.Partition)
	if e.Err != nil {
		s += " (" + e.Err.Error() + ")"
	}
	return s
}

func (e *DataLossError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrDataLoss}
	}
	return []error{ErrDataLoss, e.Err}
}

// fetchDataLoss turns the client's report of lost records into a
// *DataLossError; any other fetch error gives nil.
func fetchDataLoss(group, topic string, partition int32, err error) *DataLossError {
	var dl *kgo.ErrDataLoss
	if !errors.As(err, &dl) {
		return nil
	}
	return &DataLossError{Group: group, Topic: topic, Partition: partition, Consumed: dl.ConsumedTo, LogEnd: dl.ResetTo, Err: err}
}

// committedPastEnd returns a *DataLossError when the group's committed
// offset of topic[p] lies past the partition's end: under exactly-once the
// committed offset never passes the high watermark, so the brokers lost
// what was committed. A failed lookup gives nil and its error.
func (ps *positions) committedPastEnd(ctx context.Context, topic string, p int32) (*DataLossError, error) {
	committed, err := ps.cluster.FetchOffsets(ctx, ps.group)
	if err != nil {
		return nil, fmt.Errorf("stage: fetch committed offsets: %w", err)
	}
	ends, err := ps.cluster.ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("stage: list end offsets of %s: %w", topic, err)
	}
	c, ok := committed.Lookup(topic, p)
	if !ok || c.Err != nil {
		return nil, nil
	}
	end, ok := ends.Lookup(topic, p)
	if !ok || end.Err != nil {
		return nil, nil
	}
	return pastEnd(ps.group, topic, p, c.At, end.Offset), nil
}

// pastEnd returns a *DataLossError when committed lies past end.
func pastEnd(group, topic string, p int32, committed, end int64) *DataLossError {
	if committed <= end {
		return nil
	}
	return &DataLossError{Group: group, Topic: topic, Partition: p, Consumed: committed, LogEnd: end}
}

// explainOutOfOrder looks behind a step that fed a record at or below an
// offset its node had already seen. The client rewinds that way when the
// broker answered "offset out of range" and its reset policy chose an
// earlier offset; when the committed offset lies past the partition's end,
// that is data loss, not a bug in the feed.
func (ps *positions) explainOutOfOrder(ctx context.Context, err error) error {
	var se *StepError
	if !errors.Is(err, protocol.ErrOutOfOrderFeed) || !errors.As(err, &se) || se.Topic == "" {
		return err
	}
	dl, lerr := ps.committedPastEnd(ctx, se.Topic, se.Partition)
	if lerr != nil || dl == nil {
		return err
	}
	dl.Err = err
	return &fatal{dl}
}
