package stage

import (
	"context"
	"fmt"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
	"github.com/twmb/franz-go/pkg/kgo"
)

// taskSends is a task's stamped sends in the open step: the stamp and the
// record memory an emission takes (emitbuf.go), the sink it last resolved,
// and the acknowledgements of its sends. The session loop owns it; acks is
// written by the produce promises under the env's send lock.
type taskSends struct {
	env       *taskEnv
	st        *Stage
	partition int32

	stamp    headers.Stamp
	bufs     emitBuffers
	lastSink struct { // the last emission's sink (sinkMeta)
		name string
		meta topicMeta
	}
	acks    stepAcks
	count   int                      // the step's stamped sends
	promise func(*kgo.Record, error) // onAck, bound once
}

// emit encodes, partitions, stamps (for exactly the destination partition,
// host duty H4) and produces one emission of m inside the transaction.
func (s *taskSends) emit(ctx context.Context, p producer, n *protocol.Node, m *rawMessage, e Emission, tr *taskTracer) (err error) {
	if e.data == nil {
		return fmt.Errorf("%w: the zero Emission has no topic", ErrUndeclaredSink)
	}
	name := e.data.topicName()
	meta, ok := s.sinkMeta(name)
	if !ok {
		return fmt.Errorf("%w: topic %q (stage sinks: %q)", ErrUndeclaredSink, name, s.st.Sinks())
	}
	defer catch(&err)
	k, v, err := e.data.encode()
	if err != nil {
		return err
	}
	hasKey := k != nil
	part := partitionFor(k, !hasKey, meta.partitions, s.partition)
	if err := n.PrepareSendInto(&s.stamp, headers.Channel{Topic: meta.id, Partition: part}); err != nil {
		return err
	}
	out := s.bufs.record()
	hs := out.headers[:0]
	if n := len(e.headers) + stampHeaders; n > len(out.headers) {
		hs = make([]kgo.RecordHeader, 0, n)
	}
	for _, h := range e.headers {
		hs = append(hs, kgo.RecordHeader(h))
	}
	// AppendStampTo refuses reserved application header names. The send
	// sequence PrepareSend took is then never used, which is harmless: the
	// failed step aborts and the node is rebuilt from committed state.
	if hs, s.bufs.stamps, err = headers.AppendStampTo(hs, s.bufs.stampBuf(headers.VCSize(&s.stamp.Clock)+stampTagSize), &s.stamp, headers.DialectVC); err != nil {
		return fmt.Errorf("emission to %q: %w", name, err)
	}
	ts := m.ts
	if e.hasTS {
		ts = e.ts
	}
	out.Record = kgo.Record{Topic: name, Partition: part, Key: k, Value: v, Headers: hs, Timestamp: ts}
	if tr != nil {
		out.Record.Context = tr.cur // kotel's publish span is the delivery's child
	}
	s.produce(ctx, p, &out.Record)
	return nil
}

// produce sends one stamped record in the step's transaction.
func (s *taskSends) produce(ctx context.Context, p producer, r *kgo.Record) {
	if s.promise == nil {
		s.promise = s.onAck // bound once: a method value per produce allocates
	}
	s.count++
	s.env.sent.produced++
	p.Produce(ctx, r, s.promise)
}

// sinkMeta resolves an emission's topic: whether it is one of the stage's
// sinks, and its metadata. A handler usually sends to the same topic again
// and again, so the last answer is kept.
func (s *taskSends) sinkMeta(name string) (topicMeta, bool) {
	if name == s.lastSink.name && name != "" {
		return s.lastSink.meta, true
	}
	if !s.st.sinkSet[name] {
		return topicMeta{}, false
	}
	meta := s.env.topics[name]
	s.lastSink.name, s.lastSink.meta = name, meta
	return meta, true
}

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

// onAck is the produce callback of a stamped send.
func (s *taskSends) onAck(r *kgo.Record, err error) {
	s.env.sent.promise(r, err)
	if err != nil {
		return
	}
	s.env.sent.mu.Lock()
	s.acks.add(r, s.env.topics)
	s.env.sent.mu.Unlock()
}

// awaitSends waits until every record the step produced so far is
// acknowledged, when some task sent stamped records: one wait for all the
// step's tasks, before any of them reports its sends.
func awaitSends(ctx context.Context, p producer, ts []*task) error {
	for _, t := range ts {
		if t.node != nil && t.sends.count > 0 {
			if err := p.Flush(ctx); err != nil {
				return fmt.Errorf("stage: await send acknowledgements: %w", err)
			}
			return nil
		}
	}
	return nil
}

// report reports the acknowledged offsets of the step's stamped sends to
// the node; awaitSends has waited for them. A failed or missing
// acknowledgement fails the step.
func (s *taskSends) report(n *protocol.Node) error {
	if s.count == 0 {
		return nil
	}
	s.env.sent.mu.Lock()
	count, perr := s.acks.count, s.env.sent.err
	s.env.sent.mu.Unlock()
	if perr != nil {
		return fmt.Errorf("stage %q partition %d: send: %w", s.st.name, s.partition, perr)
	}
	if count != s.count {
		return fmt.Errorf("stage %q partition %d: %d sends, %d acknowledged", s.st.name, s.partition, s.count, count)
	}
	// Every promise has run: nothing writes the acknowledgements now.
	for _, at := range s.acks.odd {
		if err := n.Sent(at); err != nil {
			return s.stepErr(at.Offset, err)
		}
	}
	for _, c := range s.acks.channels {
		if err := n.Sent(c.at); err != nil {
			return s.stepErr(c.at.Offset, err)
		}
	}
	s.acks.reset()
	s.count = 0
	return nil
}

func (s *taskSends) stepErr(offset int64, err error) error {
	return &StepError{Stage: s.st.name, Partition: s.partition, Offset: offset, Err: err}
}

// clear forgets the step's sends once it committed or aborted.
func (s *taskSends) clear() {
	s.env.sent.mu.Lock()
	s.acks.reset()
	s.env.sent.mu.Unlock()
	s.count = 0
}

// release drops the step's record memory once it ended (emitbuf.go).
func (s *taskSends) release() { s.bufs.release() }
