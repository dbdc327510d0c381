package stage

// Hold diagnosis: ExplainHolds, the HeldRecord it returns, and how a
// task tracks its gating heads between samples to age and warn about them.

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
)

// Diagnosis says why a held record waits; its String is the stable
// vc-hold-* code. See protocol.Diagnosis for the four values.
type Diagnosis = protocol.Diagnosis

// HeldRecord is one gating head: a record at the head of its channel's hold
// queue, with the causes it still waits for. Only heads are reported: the
// records behind a head wait on it, not on causes of their own. It carries
// coordinates, claims and watermarks, never key or value bytes.
type HeldRecord struct {
	Stage     string
	Partition int32 // the task's partition
	Topic     string
	Offset    int64
	// Coordinate names the held record by topic ID.
	Coordinate headers.Coordinate
	// Timestamp is the held record's own timestamp.
	Timestamp time.Time
	// Since is when the record became its queue's head (wall clock); a
	// hold restored at restart ages from the first sample after the task
	// was built. HeldFor is how long it has gated its channel, measured
	// when ExplainHolds was called.
	Since   time.Time
	HeldFor time.Duration
	// Depth is the number of records in the queue, the head included.
	Depth int
	// Diagnosis is the most actionable diagnosis among Waiting: a cause
	// that is held itself (vc-hold-held-upstream) is reported only when no
	// cause is missing outright.
	Diagnosis Diagnosis
	Waiting   []Cause
}

// Cause is one unmet claim of a held record: the node's own description
// (diagnosis, claimed channel and offset or sequence, and the local
// watermarks that show the gap), with the claimed topic's name.
type Cause struct {
	protocol.Claim
	Topic string // the claimed channel's topic ("" if unknown here; see Channel)
}

// Summary renders the hold on one line, as the WARN line does: the task,
// the record, how long and how deep, then each cause with its code and
// what to look at.
func (h *HeldRecord) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "stage %q task %d has held %s:%d@%d for %dms (queue depth %d):",
		h.Stage, h.Partition, h.Topic, h.Coordinate.Partition, h.Offset, h.HeldFor.Milliseconds(), h.Depth)
	if len(h.Waiting) == 0 {
		b.WriteString(" no unmet cause was found at the last sample; it is about to deliver")
	}
	for i, c := range h.Waiting {
		if i > 0 {
			b.WriteString(";")
		}
		topic := cmp.Or(c.Topic, c.Channel.Topic.String())
		if c.Sequence {
			fmt.Fprintf(&b, " %s waiting on %s:%d sender %s seq %d (delivered seq %d, local frontier %d, position %d) — %s",
				c.Diagnosis, topic, c.Channel.Partition, c.Sender, c.Seq, c.DeliveredSeq, c.Frontier, c.Position, advice(c.Diagnosis))
		} else {
			fmt.Fprintf(&b, " %s waiting on %s:%d offset %d (local frontier %d, position %d) — %s",
				c.Diagnosis, topic, c.Channel.Partition, c.Offset, c.Frontier, c.Position, advice(c.Diagnosis))
		}
	}
	return b.String()
}

func advice(d Diagnosis) string {
	switch d {
	case protocol.NotFetched:
		return "the cause has not reached this consumer yet; check lag and the producer on that topic"
	case protocol.HeldUpstream:
		return "the cause is itself held here; follow that channel's head"
	case protocol.SenderUnseen:
		return "no record from that sender delivered on that channel yet; if it never writes there again this is the late-joiner window"
	case protocol.SenderBehind:
		return "the sender's later records are in flight or in an uncommitted transaction; check its commit interval"
	}
	return "unknown"
}

// ExplainHolds returns one entry per gating head across this instance's
// tasks, longest held first. It reads the snapshot the runtime publishes
// after every step and idle poll, so it never waits for a step; the reading
// is at most one poll interval stale and describes committed state. It is a
// diagnosis, not a source of truth about application state.
func (a *App) ExplainHolds() []HeldRecord {
	snap := a.status.snap.Load()
	if snap == nil {
		return nil
	}
	now := a.cfg.WallClock()
	var out []HeldRecord
	for i := range snap.tasks {
		for _, h := range snap.tasks[i].holds {
			h.HeldFor = max(now.Sub(h.Since), 0)
			h.Waiting = slices.Clone(h.Waiting)
			out = append(out, h)
		}
	}
	slices.SortStableFunc(out, func(x, y HeldRecord) int {
		if c := x.Since.Compare(y.Since); c != 0 {
			return c
		}
		if x.Stage != y.Stage {
			return strings.Compare(x.Stage, y.Stage)
		}
		if x.Partition != y.Partition {
			return int(x.Partition - y.Partition)
		}
		return strings.Compare(x.Topic, y.Topic)
	})
	return out
}

// headTrack is what the runtime remembers of a channel's head between
// samples: which record it is, since when, and whether it was warned about.
type headTrack struct {
	coord  headers.Coordinate
	since  time.Time
	warned bool
}

// sample reads the task's holds and counters for the snapshot, and warns
// once about each hold older than HoldWarningAfter. A task whose node is
// being rebuilt keeps its holds in prev, the last snapshot: an aborted step
// does not make a hold new.
func (t *task) sample(now time.Time, prev *snapshot) taskSnapshot {
	s := taskSnapshot{
		stage: t.st.name, partition: t.partition, rebuilding: t.node == nil,
		delivered: t.counts.delivered, replays: t.counts.replays,
		ticks: t.counts.ticks, sweepsSkipped: t.counts.sweepsSkipped,
	}
	if t.node == nil {
		if prev != nil {
			for _, p := range prev.tasks {
				if p.stage == s.stage && p.partition == s.partition {
					s.holds, s.held, s.stampOffsets, s.stampSeqs = p.holds, p.held, p.stampOffsets, p.stampSeqs
				}
			}
		}
		return s
	}
	c := t.node.Counters()
	s.held, s.stampOffsets, s.stampSeqs = c.Held, c.StampOffsetEntries, c.StampSeqEntries
	hs, err := t.node.ExplainHolds()
	if err != nil {
		t.env.log.Warn("stage: explain holds", "stage", t.st.name, "partition", t.partition, "err", err)
		return s
	}
	if t.heads == nil {
		t.heads = make(map[headers.Channel]*headTrack)
	}
	seen := make(map[headers.Channel]bool, len(hs))
	for _, h := range hs {
		ch := h.Coordinate.Channel
		seen[ch] = true
		tr := t.heads[ch]
		if tr == nil || tr.coord != h.Coordinate {
			tr = &headTrack{coord: h.Coordinate, since: now} // a new head is a new hold
			t.heads[ch] = tr
		}
		hr := t.heldRecord(&h, tr.since)
		if after := t.env.holdWarningAfter; after > 0 && !tr.warned && now.Sub(tr.since) >= after {
			tr.warned = true
			hr.HeldFor = now.Sub(tr.since)
			t.env.log.Warn("stage: record held past HoldWarningAfter: "+hr.Summary(),
				"code", hr.Diagnosis.String(), "stage", hr.Stage, "partition", hr.Partition,
				"topic", hr.Topic, "offset", hr.Offset, "held_for", hr.HeldFor, "depth", hr.Depth)
			hr.HeldFor = 0
		}
		s.holds = append(s.holds, hr)
	}
	for ch := range t.heads {
		if !seen[ch] {
			delete(t.heads, ch)
		}
	}
	return s
}

func (t *task) heldRecord(h *protocol.Hold, since time.Time) HeldRecord {
	names := t.env.names
	hr := HeldRecord{
		Stage: t.st.name, Partition: t.partition,
		Topic: names[h.Coordinate.Topic], Offset: h.Coordinate.Offset, Coordinate: h.Coordinate,
		Timestamp: time.UnixMilli(h.Timestamp), Since: since, Depth: h.Depth,
	}
	for _, c := range h.Waiting {
		hr.Waiting = append(hr.Waiting, Cause{Claim: c, Topic: names[c.Channel.Topic]})
		if hr.Diagnosis == 0 || hr.Diagnosis == protocol.HeldUpstream && c.Diagnosis != protocol.HeldUpstream {
			hr.Diagnosis = c.Diagnosis
		}
	}
	return hr
}
