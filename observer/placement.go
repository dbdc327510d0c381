package observer

// Cross-partition causes: the observer's view of the stage's scope warning.
//
// A stage task consumes partition p of each of its source topics, so a
// record's cause on another partition number of a co-partitioned topic is
// consumed by another task and is not waited for. Claims across partitions
// are normal (a producer that read several partitions claims them all);
// what marks a mistake is a record that is not where Kafka's default
// partitioner would put it: its key's murmur2 partition is another one. A
// stamped, keyed record placed so, claiming an offset on another partition
// of a topic with as many partitions as its own (a topic a stage may read
// with it), is reported once per topic pair, with a count.

import (
	"fmt"

	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kgo"
)

// CodeCrossPartitionCause: a record not on its key's murmur2 partition
// claims a cause on another partition of a topic partitioned like its own.
const CodeCrossPartitionCause Code = "cross-partition-cause"

// placement is the writer's view of topic partition counts: the observed
// topics' counts as the cluster's metadata gives them (an observer sharing
// the topics with others consumes only some partitions of each), or, for
// a writer fed without an observer, taken from the channels it consumes
// and rebuilt when the set of channels grows.
type placement struct {
	meta   map[headers.TopicID]int32 // from the cluster; nil: from the channels
	parts  map[headers.TopicID]int32
	seen   int // len(writer.chans) when parts was built
	murmur kgo.TopicPartitioner
	rec    kgo.Record // scratch for the partitioner
}

// partitions returns how many partitions observed topic has, or 0 when it
// is not observed.
func (w *writer) partitions(topic headers.TopicID) int32 {
	p := &w.place
	if p.meta != nil {
		return p.meta[topic]
	}
	if p.parts == nil || p.seen != len(w.chans) {
		p.parts = make(map[headers.TopicID]int32)
		for ch, cs := range w.chans {
			if cs.start >= 0 || cs.name != "" { // consumed, not only claimed
				p.parts[ch.Topic] = max(p.parts[ch.Topic], ch.Partition+1)
			}
		}
		p.seen = len(w.chans)
	}
	return p.parts[topic]
}

// checkPlacement looks at one decoded data record: its key and the offset
// claims of its stamp.
func (w *writer) checkPlacement(in *incoming, st *headers.Stamp) {
	if in.Key == nil || st.Tagged || st.Clock.NumOffsets() == 0 {
		// A stage's sends (tagged) go where murmur2 puts them, except its
		// ticks, which stay on the task's partition by design.
		return
	}
	n := w.partitions(in.Channel.Topic)
	if n <= 1 {
		return
	}
	p := &w.place
	if p.murmur == nil {
		p.murmur = kgo.StickyKeyPartitioner(nil).ForTopic("")
	}
	p.rec.Key = in.Key
	home := int32(p.murmur.Partition(&p.rec, int(n)))
	p.rec.Key = nil
	if home == in.Channel.Partition {
		return
	}
	at := headers.Coordinate{Channel: in.Channel, Offset: in.Offset}
	var last headers.TopicID
	for e := range st.Clock.OffsetEntries() {
		if e.Channel.Partition == in.Channel.Partition || e.Channel.Topic == last || w.partitions(e.Channel.Topic) != n {
			continue
		}
		last = e.Channel.Topic
		claimed := headers.Coordinate{Channel: e.Channel, Offset: e.Offset}
		name := e.Channel.Topic.String()
		if cs := w.chans[e.Channel]; cs != nil && cs.name != "" {
			name = cs.name
		}
		// Counted per partition of the record's topic, added up by the
		// owner of the topic's partition 0 (see partials.go).
		w.contribute(CodeCrossPartitionCause, "cross-partition-cause|"+in.Channel.Topic.String()+"|"+e.Channel.Topic.String(), at, claimed,
			fmt.Sprintf("record %s of topic %q is on partition %d, but murmur2 of its key gives %d; it claims %s of topic %q, which a stage task for partition %d does not consume: "+
				"the producer of %q likely does not partition with murmur2, or related records are keyed differently",
				at, in.Topic, in.Channel.Partition, home, claimed, name, in.Channel.Partition, in.Topic))
	}
}
