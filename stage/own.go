package stage

import (
	"context"
	"fmt"

	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Own outputs. A task's later incarnations claim the sends of its earlier
// ones by offset, and only the broker knows those offsets: each stamped
// send's acknowledgement is collected, and before the step's protocol
// state is flushed the task waits for them and reports them to the node,
// so the offsets commit with the sends. A sink's end offset would be a
// commit marker under exactly-once, which no writer may claim (wire
// constraint 8).
//
// The node keeps only the highest acknowledged offset of each sink
// channel (a lower one changes nothing), so the promises keep that per
// channel and the task reports one acknowledgement per channel, not one per
// send. Every send is still counted, and an acknowledgement the node would
// refuse is reported as it came.

// ackedChannel is the highest acknowledged offset of the step's sends to
// one sink channel.
type ackedChannel struct {
	topic string // the records' topic name, to match promises without a lookup
	at    headers.Coordinate
}

// stepAcks collects the acknowledgements of a task's stamped sends in the
// open step. Produce promises write it under the env's send lock.
type stepAcks struct {
	count    int                  // acknowledged sends
	channels []ackedChannel       // highest offset per sink channel
	last     int                  // index into channels of the last match
	odd      []headers.Coordinate // acknowledgements with a negative offset
}

// add records one acknowledged send of r; topics resolves its topic's ID.
func (a *stepAcks) add(r *kgo.Record, topics map[string]topicMeta) {
	a.count++
	if r.Offset < 0 {
		// The node refuses it; report it unmerged so the step fails.
		ch := headers.Channel{Topic: topics[r.Topic].id, Partition: r.Partition}
		a.odd = append(a.odd, headers.Coordinate{Channel: ch, Offset: r.Offset})
		return
	}
	if a.last < len(a.channels) {
		if c := &a.channels[a.last]; c.at.Partition == r.Partition && c.topic == r.Topic {
			c.at.Offset = max(c.at.Offset, r.Offset)
			return
		}
	}
	for i := range a.channels {
		if c := &a.channels[i]; c.at.Partition == r.Partition && c.topic == r.Topic {
			c.at.Offset = max(c.at.Offset, r.Offset)
			a.last = i
			return
		}
	}
	ch := headers.Channel{Topic: topics[r.Topic].id, Partition: r.Partition}
	a.last = len(a.channels)
	a.channels = append(a.channels, ackedChannel{topic: r.Topic, at: headers.Coordinate{Channel: ch, Offset: r.Offset}})
}

// reset forgets the step's acknowledgements, keeping the memory.
func (a *stepAcks) reset() {
	a.count, a.last = 0, 0
	a.channels = a.channels[:0]
	a.odd = a.odd[:0]
}

// sendPromise is the produce callback of a stamped send.
func (t *task) sendPromise(r *kgo.Record, err error) {
	t.env.sent.promise(r, err)
	if err != nil {
		return
	}
	t.env.sent.mu.Lock()
	t.acks.add(r, t.env.topics)
	t.env.sent.mu.Unlock()
}

// awaitSends waits until every record the step produced so far is
// acknowledged, when some task sent stamped records: one wait for all the
// step's tasks, before any of them reports its sends.
func awaitSends(ctx context.Context, sess *kgo.GroupTransactSession, ts []*task) error {
	for _, t := range ts {
		if t.node != nil && t.sends > 0 {
			if err := sess.Client().Flush(ctx); err != nil {
				return fmt.Errorf("stage: await send acknowledgements: %w", err)
			}
			return nil
		}
	}
	return nil
}

// reportSends reports the acknowledged offsets of the step's stamped sends
// to the node; awaitSends has waited for them. A failed or missing
// acknowledgement fails the step.
func (t *task) reportSends() error {
	if t.sends == 0 {
		return nil
	}
	t.env.sent.mu.Lock()
	count, perr := t.acks.count, t.env.sent.err
	t.env.sent.mu.Unlock()
	if perr != nil {
		return fmt.Errorf("stage %q partition %d: send: %w", t.st.name, t.partition, perr)
	}
	if count != t.sends {
		return fmt.Errorf("stage %q partition %d: %d sends, %d acknowledged", t.st.name, t.partition, t.sends, count)
	}
	// Every promise has run: nothing writes the acknowledgements now.
	for _, at := range t.acks.odd {
		if err := t.node.Sent(at); err != nil {
			return t.stepErr("", at.Offset, err)
		}
	}
	for _, c := range t.acks.channels {
		if err := t.node.Sent(c.at); err != nil {
			return t.stepErr("", c.at.Offset, err)
		}
	}
	t.acks.reset()
	t.sends = 0
	return nil
}

// clearSends forgets the step's sends once it committed or aborted.
func (t *task) clearSends() {
	t.env.sent.mu.Lock()
	t.acks.reset()
	t.env.sent.mu.Unlock()
	t.sends = 0
}
