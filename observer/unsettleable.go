package observer

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"

	"github.com/parsley-go/parsley/headers"
)

// unsettleableClaims is the rule that finds offset claims naming no
// committed record: a marker, an offset skipped by a read_committed fetch
// (an aborted record), or an offset at or past the log end now.
type unsettleableClaims struct{ s *Store }

// unsettleableHit is one claimed position no committed record occupies.
type unsettleableHit struct {
	claimed headers.Coordinate
	name    string // the claimed topic's name
	rec     int64  // the first record claiming it
	n       int    // how many records claim it
	why     string
	// bridged: the claimed offset is a marker or a skipped record, which a
	// consumer settles from its position (see finding).
	bridged bool
}

func (u unsettleableClaims) find(ctx context.Context, offs map[headers.Channel]ChannelOffsets) ([]Finding, error) {
	hits, err := u.hits(ctx, offs)
	if err != nil {
		return nil, err
	}
	var out []Finding
	for _, h := range hits {
		f, err := u.finding(ctx, h)
		if err != nil {
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// collect reads candidate claims rows, each with the claimed channel and
// the values lo..hi (inclusive) that would be wrong on it, and classifies
// the claims in them on such values, per claimed position: the first
// claiming record and how many claim it.
func (u unsettleableClaims) collect(ctx context.Context, offs map[headers.Channel]ChannelOffsets, q string, args ...any) ([]unsettleableHit, error) {
	rows, err := u.s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("observer: find unsettleable claims: %w", err)
	}
	defer rows.Close()
	type pos struct{ ch, value int64 }
	found := map[pos]*unsettleableHit{}
	var order []pos
	var pairs []claimPair
	for rows.Next() {
		var topic, blob []byte
		var h unsettleableHit
		var chID, lo, hi, blockLo, start, next, pruned int64
		var kind sql.NullInt64
		if err := rows.Scan(&topic, &h.claimed.Partition, &h.name, &start, &next, &pruned, &chID, &lo, &hi, &kind, &blockLo, &blob); err != nil {
			return nil, fmt.Errorf("observer: find unsettleable claims: %w", err)
		}
		if pairs, err = decodeClaimPairs(pairs[:0], blockLo, blob); err != nil {
			return nil, fmt.Errorf("observer: find unsettleable claims: %w", err)
		}
		copy(h.claimed.Topic[:], topic)
		for _, p := range pairs {
			if p.value < lo || p.value > hi {
				continue
			}
			k := pos{chID, p.value}
			if f, ok := found[k]; ok {
				f.rec, f.n = min(f.rec, p.rec), f.n+1
				continue
			}
			v := p.value
			h := h
			h.claimed.Offset, h.rec, h.n = v, p.rec, 1
			co, known := offs[h.claimed.Channel]
			if h.name == "" && known {
				h.name = co.Name // a channel only claimed, never consumed
			}
			switch {
			case kind.Valid && recordKind(kind.Int64) == kindControl:
				h.why, h.bridged = "a transaction marker", true
			case kind.Valid && recordKind(kind.Int64) == kindAborted:
				h.why, h.bridged = "a record of an aborted transaction", true
			case start >= 0 && v >= max(start, pruned) && v < next:
				h.why, h.bridged = "an offset no committed record occupies (an aborted or skipped record)", true
			case known && v >= co.End:
				h.why = fmt.Sprintf("an offset at or past the log end (%d)", co.End)
			default:
				continue
			}
			found[k] = &h
			order = append(order, k)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("observer: find unsettleable claims: %w", err)
	}
	slices.SortFunc(order, func(a, b pos) int { return cmp.Or(cmp.Compare(a.ch, b.ch), cmp.Compare(a.value, b.value)) })
	hits := make([]unsettleableHit, 0, len(order))
	for _, k := range order {
		hits = append(hits, *found[k])
	}
	return hits, nil
}

// hits runs collect over the positions that can be wrong.
func (u unsettleableClaims) hits(ctx context.Context, offs map[headers.Channel]ChannelOffsets) ([]unsettleableHit, error) {
	var hits []unsettleableHit
	add := func(q string, args ...any) error {
		hs, err := u.collect(ctx, offs, q, args...)
		hits = append(hits, hs...)
		return err
	}
	// Each query below starts from the few positions that can be wrong —
	// markers and aborted records, skipped ranges, the tail past the log
	// end — and looks the claims on them up in the claim index, a bounded
	// range of its key per position, so the cost does not grow with the
	// store.
	if err := add(`
		SELECT ch.topic, ch.part, ch.name, ch.start_off, ch.next_off, ch.pruned_below, ch.id, r.off, r.off, r.kind, c.lo, c.pairs
		FROM records r JOIN channels ch ON ch.id = r.ch JOIN claims c ON c.ch = r.ch
			AND c.lo BETWEEN r.off - ` + itoa(claimSpan) + ` AND r.off AND c.hi >= r.off
		WHERE r.kind IN ` + sqlHoleKinds); err != nil {
		return nil, err
	}
	if err := add(`
		SELECT ch.topic, ch.part, ch.name, ch.start_off, ch.next_off, ch.pruned_below, ch.id,
			max(g.from_off, ch.pruned_below), g.to_off - 1, NULL, c.lo, c.pairs
		FROM gaps g CROSS JOIN channels ch CROSS JOIN claims c -- gaps outermost: there are few
		WHERE ch.id = g.ch AND c.ch = g.ch AND c.lo BETWEEN g.from_off - ` + itoa(claimSpan) + ` AND g.to_off - 1
			AND c.hi >= max(g.from_off, ch.pruned_below)`); err != nil {
		return nil, err
	}
	chans, err := u.s.Channels(ctx)
	if err != nil {
		return nil, err
	}
	for _, ci := range chans {
		co, ok := offs[ci.Channel]
		if !ok {
			continue
		}
		if err := add(`
			SELECT ch.topic, ch.part, ch.name, -1, -1, 0, ch.id, ?, `+itoa(math.MaxInt64)+`, NULL, c.lo, c.pairs
			FROM channels ch JOIN claims c ON c.ch = ch.id
			WHERE ch.topic = ? AND ch.part = ? AND c.lo >= ? AND c.hi >= ?`,
			co.End, ci.Channel.Topic[:], ci.Channel.Partition, co.End-claimSpan, co.End); err != nil {
			return nil, err
		}
	}
	return hits, nil
}

// finding describes one hit.
func (u unsettleableClaims) finding(ctx context.Context, h unsettleableHit) (Finding, error) {
	by, byTopic, err := u.s.coordOfRec(ctx, h.rec)
	if err != nil {
		return Finding{}, err
	}
	more := ""
	if h.n > 1 {
		more = fmt.Sprintf(" (and %d more records)", h.n-1)
	}
	f := Finding{
		Key:  "unsettleable-claim|" + h.claimed.String(),
		Code: CodeUnsettleableClaim, Severity: CodeUnsettleableClaim.Severity(), Topic: byTopic,
		Coordinates: []string{by.String(), h.claimed.String()},
		Summary:     fmt.Sprintf("record %s (topic %q)%s claims %s (topic %q), %s", by, byTopic, more, h.claimed, h.name, h.why),
		Action:      CodeUnsettleableClaim.Action(), Count: h.n,
	}
	if h.bridged {
		// A read_committed consumer's position moves past markers and
		// aborted records, and a Parsley consumer settles claims on them
		// from that position (position-advance bridging): Parsley
		// stages themselves write such claims, from a frontier folded
		// up to a marker or from sink end offsets. Only a reader that
		// settles claims on records alone (a strict parsley.causes v1
		// reader) waits here, so this is information, not an error.
		f.Severity = SeverityInfo
		f.Summary += "; consumers that track their position (Parsley stages, the bridge) settle it once they read past it"
		f.Action = bridgedAction
	}
	return f, nil
}

// bridgedAction is what to do about a claim on a marker or a skipped
// record: nothing, for Parsley consumers.
const bridgedAction = "nothing for Parsley consumers; a reader that settles claims only on records holds the claiming record until a later record on that channel arrives — have such writers claim only committed record offsets"
