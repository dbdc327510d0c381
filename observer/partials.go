package observer

// Findings about more than one channel, and who records them.
//
// Every finding has an anchor: the channel whose owner records it, keeps
// its lifecycle and counts it in its metrics. An observer without a group
// owns every channel. In a group (shard.go) each channel has one owner at
// a time, so each finding has one recorder:
//
//   - a finding about one record (sequence-gap, stamp-regression,
//     undecodable-stamp, a claim past the record's own position) is
//     anchored at the record's channel;
//   - a finding about a topic (partially-stamped-topic, stamp-growth,
//     cross-partition-cause) at the topic's partition 0;
//   - a finding about a claimed position (unsettleable-claim) or a claimed
//     sender's channel (late-joiner-window) at that channel when an
//     observer of the group reads it, else at the first channel (in
//     coordinate order) whose records make the claim.
//
// What a finding about several channels needs from each is a partial: the
// contribution of one source channel, computed by that channel's owner
// from its own records — how many of them contribute, the first, and what
// it claims. The anchor's owner adds the partials up. Adding up is the
// same computation with one observer or many, so a group of shards
// reports what one observer over the same topics would.

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"

	"github.com/parsley-go/parsley/headers"
)

// ownership is what an evaluation knows about the channels: which this
// observer owns, which some observer of its group reads, and their names.
type ownership struct {
	owned    map[int64]bool
	observed map[int64]bool // owned and consumed here, or read by another shard
	ch       map[int64]headers.Channel
	id       map[headers.Channel]int64
	name     map[int64]string
	text     map[string]int64 // by Channel.String()
}

func (s *Store) ownership(ctx context.Context) (*ownership, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT c.id, c.topic, c.part, c.name, c.owned, c.start_off >= 0 OR EXISTS (SELECT 1 FROM remote_channels rc WHERE rc.ch = c.id)
		FROM channels c`)
	if err != nil {
		return nil, fmt.Errorf("observer: channel ownership: %w", err)
	}
	defer rows.Close()
	o := &ownership{owned: map[int64]bool{}, observed: map[int64]bool{}, ch: map[int64]headers.Channel{}, id: map[headers.Channel]int64{},
		name: map[int64]string{}, text: map[string]int64{}}
	for rows.Next() {
		var id int64
		var topic []byte
		var ch headers.Channel
		var name string
		var owned, observed bool
		if err := rows.Scan(&id, &topic, &ch.Partition, &name, &owned, &observed); err != nil {
			return nil, fmt.Errorf("observer: channel ownership: %w", err)
		}
		copy(ch.Topic[:], topic)
		o.ch[id], o.id[ch], o.name[id], o.text[ch.String()] = ch, id, name, id
		o.owned[id] = owned
		// A channel only claimed, never read, is observed by nobody.
		o.observed[id] = observed
	}
	return o, rows.Err()
}

// ownsChannel reports whether this observer owns ch.
func (o *ownership) ownsChannel(ch headers.Channel) bool {
	id, ok := o.id[ch]
	return ok && o.owned[id]
}

// anchoredHere reports whether a finding anchored at anchor (a channel's
// text; "" for one recorded before anchors were) is this observer's to
// record.
func (o *ownership) anchoredHere(anchor string) bool {
	if anchor == "" {
		return true
	}
	id, ok := o.text[anchor]
	return ok && o.owned[id]
}

// observedChannel reports whether an observer of the group reads ch.
func (o *ownership) observedChannel(ch headers.Channel) bool {
	id, ok := o.id[ch]
	return ok && o.observed[id]
}

// topicName returns a name the store knows for topic, or "".
func (o *ownership) topicName(topic headers.TopicID) string {
	for id, ch := range o.ch {
		if ch.Topic == topic && o.name[id] != "" {
			return o.name[id]
		}
	}
	return ""
}

// coordLess orders coordinates: topic ID bytes, partition, offset. It
// picks "the first" record among several channels' records the same way
// whoever ingested them and in whatever order.
func coordCompare(a, b headers.Coordinate) int {
	return cmp.Or(a.Channel.Compare(b.Channel), cmp.Compare(a.Offset, b.Offset))
}

// partialRow is one stored partial.
type partialRow struct {
	src     headers.Channel
	n       int64
	first   headers.Coordinate // the source's first contributing record
	claimed string
	why     string
	bridged bool
}

// partialsOf returns the stored partials of code, by finding key, each
// key's in coordinate order of their first records.
func (s *Store) partialsOf(ctx context.Context, own *ownership, code Code) (map[string][]partialRow, []string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT key, src, n, first_off, claimed, why, bridged FROM partials WHERE code = ? AND n > 0`, string(code))
	if err != nil {
		return nil, nil, fmt.Errorf("observer: read %s contributions: %w", code, err)
	}
	defer rows.Close()
	out := map[string][]partialRow{}
	var keys []string
	for rows.Next() {
		var key string
		var src, first int64
		var p partialRow
		if err := rows.Scan(&key, &src, &p.n, &first, &p.claimed, &p.why, &p.bridged); err != nil {
			return nil, nil, fmt.Errorf("observer: read %s contributions: %w", code, err)
		}
		ch, ok := own.ch[src]
		if !ok {
			continue
		}
		p.src, p.first = ch, headers.Coordinate{Channel: ch, Offset: first}
		if _, ok := out[key]; !ok {
			keys = append(keys, key)
		}
		out[key] = append(out[key], p)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("observer: read %s contributions: %w", code, err)
	}
	for _, ps := range out {
		slices.SortFunc(ps, func(a, b partialRow) int { return coordCompare(a.first, b.first) })
	}
	slices.Sort(keys)
	return out, keys, nil
}

// sumPartials returns how many records the partials count.
func sumPartials(ps []partialRow) int64 {
	var n int64
	for _, p := range ps {
		n += p.n
	}
	return n
}

// crossPartitionFindings adds up the cross-partition-cause partials of the
// topics whose partition 0 this observer owns.
func (s *Store) crossPartitionFindings(ctx context.Context, own *ownership) ([]Finding, error) {
	parts, keys, err := s.partialsOf(ctx, own, CodeCrossPartitionCause)
	if err != nil {
		return nil, err
	}
	var out []Finding
	for _, key := range keys {
		ps := parts[key]
		anchor := headers.Channel{Topic: ps[0].src.Topic, Partition: 0}
		if !own.ownsChannel(anchor) {
			continue
		}
		first := ps[0]
		out = append(out, Finding{
			Key: key, Code: CodeCrossPartitionCause, Severity: CodeCrossPartitionCause.Severity(), Topic: own.topicName(first.src.Topic),
			Coordinates: []string{first.first.String(), first.claimed}, Summary: first.why, Action: CodeCrossPartitionCause.Action(),
			Count: int(sumPartials(ps)), anchor: anchor.String(),
		})
	}
	return out, nil
}

// The writer's side: partials counted at ingest.

// partialKey names one source channel's partial of a finding.
type partialKey struct {
	key string
	src int64
}

// partial is a partial as the writer keeps it while counting.
type partial struct {
	code    Code
	n, hw   int64
	first   int64
	claimed string
	why     string
	dirty   bool
}

// contribute counts the record at `at` into the partial of the finding
// key from its channel, once: a record at or below the highest offset
// counted is one read again (a channel this observer reads anew after it
// moved here), and is not counted twice.
func (w *writer) contribute(code Code, key string, at, claimed headers.Coordinate, why string) {
	cs := w.chans[at.Channel]
	k := partialKey{key, cs.id}
	p := w.partials[k]
	if p == nil {
		p = &partial{code: code, hw: -1, first: at.Offset, claimed: claimed.String(), why: why}
		w.partials[k] = p
	}
	if at.Offset <= p.hw {
		return
	}
	p.n, p.hw, p.dirty = p.n+1, at.Offset, true
}

// loadPartials reads the partials the writer counts at ingest.
func (w *writer) loadPartials(ctx context.Context) error {
	w.partials = map[partialKey]*partial{}
	rows, err := w.st.db.QueryContext(ctx, `SELECT key, src, code, n, hw, first_off, claimed, why FROM partials WHERE code = ?`, string(CodeCrossPartitionCause))
	if err != nil {
		return fmt.Errorf("observer: load contributions: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var k partialKey
		p := new(partial)
		if err := rows.Scan(&k.key, &k.src, &p.code, &p.n, &p.hw, &p.first, &p.claimed, &p.why); err != nil {
			return fmt.Errorf("observer: load contributions: %w", err)
		}
		w.partials[k] = p
	}
	return rows.Err()
}

// flushPartials writes the partials counted in this batch.
func (w *writer) flushPartials(ctx context.Context) error {
	for k, p := range w.partials {
		if !p.dirty {
			continue
		}
		if _, err := w.c.ExecContext(ctx, `INSERT INTO partials(key, src, code, n, hw, first_off, claimed, why) VALUES(?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT(key, src) DO UPDATE SET n = excluded.n, hw = excluded.hw, first_off = excluded.first_off, claimed = excluded.claimed, why = excluded.why`,
			k.key, k.src, string(p.code), p.n, p.hw, p.first, p.claimed, p.why); err != nil {
			return fmt.Errorf("observer: ingest: contribution to %s: %w", k.key, err)
		}
		p.dirty = false
	}
	return nil
}

// newFindingID returns the id a new finding with key is stored under: in
// a group, one derived from the key, so that every shard's copy and every
// link name it alike wherever it moves; else nil, for the next number.
func (s *Store) newFindingID(key string) any {
	if !s.sharded {
		return nil
	}
	return findingIDOf(key)
}

// findingIDOf derives a finding's id from its key: 53 bits of its FNV-1a
// hash (JSON numbers keep them exact), never 0.
func findingIDOf(key string) int64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return max(1, int64(h.Sum64()&(1<<53-1)))
}

// appendFineParts appends the one-record parts a channel's owner published
// for a small channel (encodeFineParts).
func appendFineParts(dst []part, ch headers.Channel, b []byte) ([]part, error) {
	r := compactReader{b: b}
	for len(r.b) > 0 && r.err == nil {
		off := int64(r.uvarint(maxPosition))
		e := r.uvarint(1 << 32)
		n := r.uvarint(1 << 32)
		ts := r.varint()
		at := headers.Coordinate{Channel: ch, Offset: off}
		dst = append(dst, part{1, float64(e), float64(n), ts, at, at})
	}
	if r.err != nil {
		return dst, errCorruptStore
	}
	return dst, nil
}

// appendFinePart appends one record's part (offset, stamp entries, header
// bytes, timestamp) as appendFineParts reads it.
func appendFinePart(b []byte, off, entries, bytes, ts int64) []byte {
	b = binary.AppendUvarint(b, uint64(off))
	b = binary.AppendUvarint(b, uint64(entries))
	b = binary.AppendUvarint(b, uint64(bytes))
	return binary.AppendVarint(b, ts)
}
