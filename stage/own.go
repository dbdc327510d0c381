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
// state is flushed the task waits for them and reports each to the node,
// so the offsets commit with the sends. A sink's end offset would be a
// commit marker under exactly-once, which no writer may claim (wire
// constraint 8).

// sendPromise is the produce callback of a stamped send.
func (t *task) sendPromise(r *kgo.Record, err error) {
	t.env.sent.promise(r, err)
	if err != nil {
		return
	}
	ch := headers.Channel{Topic: t.env.topics[r.Topic].id, Partition: r.Partition}
	t.env.sent.mu.Lock()
	t.acks = append(t.acks, headers.Coordinate{Channel: ch, Offset: r.Offset})
	t.env.sent.mu.Unlock()
}

// reportSends waits until every stamped send of the step is acknowledged
// and reports the offsets to the node. A failed send fails the step.
func (t *task) reportSends(ctx context.Context, sess *kgo.GroupTransactSession) error {
	if t.sends == 0 {
		return nil
	}
	if err := sess.Client().Flush(ctx); err != nil {
		return fmt.Errorf("stage %q partition %d: await send acknowledgements: %w", t.st.name, t.partition, err)
	}
	t.env.sent.mu.Lock()
	acks, perr := t.acks, t.env.sent.err
	t.acks = nil
	t.env.sent.mu.Unlock()
	if perr != nil {
		return fmt.Errorf("stage %q partition %d: send: %w", t.st.name, t.partition, perr)
	}
	if len(acks) != t.sends {
		return fmt.Errorf("stage %q partition %d: %d sends, %d acknowledged", t.st.name, t.partition, t.sends, len(acks))
	}
	for _, at := range acks {
		if err := t.node.Sent(at); err != nil {
			return t.stepErr("", at.Offset, err)
		}
	}
	t.sends = 0
	return nil
}

// clearSends forgets the step's sends once it committed or aborted.
func (t *task) clearSends() {
	t.env.sent.mu.Lock()
	t.acks = t.acks[:0]
	t.env.sent.mu.Unlock()
	t.sends = 0
}
