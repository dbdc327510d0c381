package observer

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/parsley-go/parsley/headers"
)

// unsettleableClaims is the rule that finds offset claims naming no
// committed record: a marker, an offset skipped by a read_committed fetch
// (an aborted record), or an offset at or past the log end now.
type unsettleableClaims struct{ s *Store }

// unsettleableHit is the claims one channel's records make on a position
// no committed record occupies.
type unsettleableHit struct {
	claimed headers.Coordinate
	name    string // the claimed topic's name
	src     int64  // the claiming records' channel
	rec     int64  // the first of them (record ids follow offsets on a channel)
	first   int64  // its offset
	n       int    // how many of them claim it
	why     string
	// bridged: the claimed offset is a marker or a skipped record, which a
	// consumer settles from its position (see finding).
	bridged bool
}

// find records the hits of the claims this observer's channels make as
// their partials, and adds up every channel's partials for the positions
// anchored here (partials.go).
func (u unsettleableClaims) find(ctx context.Context, offs map[headers.Channel]ChannelOffsets, own *ownership) ([]Finding, error) {
	hits, err := u.hits(ctx, offs)
	if err != nil {
		return nil, err
	}
	if !u.s.readOnly {
		if err := u.s.storeUnsettleablePartials(ctx, hits, unknownChannels(offs)); err != nil {
			return nil, err
		}
	}
	parts, keys, err := u.s.partialsOf(ctx, own, CodeUnsettleableClaim)
	if err != nil {
		return nil, err
	}
	if u.s.readOnly {
		// Nothing was recorded: what this store's channels claim now.
		parts, keys = map[string][]partialRow{}, nil
		for _, h := range hits {
			key := "unsettleable-claim|" + h.claimed.String()
			if _, ok := parts[key]; !ok {
				keys = append(keys, key)
			}
			parts[key] = append(parts[key], h.partial(own))
		}
		for _, ps := range parts {
			slices.SortFunc(ps, func(a, b partialRow) int { return coordCompare(a.first, b.first) })
		}
		slices.Sort(keys)
	}
	var out []Finding
	for _, key := range keys {
		ps := parts[key]
		claimed, err := ParseRef(ps[0].claimed)
		if err != nil || !claimed.ByID {
			continue
		}
		// Anchored at the claimed channel, or, when no observer reads it,
		// at the first claiming record's.
		anchor := headers.Channel{Topic: claimed.ID, Partition: claimed.Partition}
		if !own.observedChannel(anchor) {
			anchor = ps[0].src
		}
		if !own.ownsChannel(anchor) {
			continue
		}
		out = append(out, u.finding(own, ps, anchor))
	}
	return out, nil
}

// partial is the hit as a stored partial reads.
func (h unsettleableHit) partial(own *ownership) partialRow {
	src := own.ch[h.src]
	return partialRow{src: src, n: int64(h.n), first: headers.Coordinate{Channel: src, Offset: h.first}, claimed: h.claimed.String(), why: h.name + "\x00" + h.why, bridged: h.bridged}
}

// storeUnsettleablePartials replaces the unsettleable-claim partials of
// the channels this observer owns with hits, but for the claims on
// channels whose offsets are unknown now: what was found of those stays as
// it was, for a claim past the log end cannot be told from one below it.
func (s *Store) storeUnsettleablePartials(ctx context.Context, hits []unsettleableHit, unknown []headers.Channel) error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("observer: record unsettleable claims: %w", err)
	}
	defer tx.Rollback()
	q := `DELETE FROM partials WHERE code = ? AND src IN (SELECT id FROM channels WHERE owned)`
	args := []any{string(CodeUnsettleableClaim)}
	for _, ch := range unknown {
		prefix := ch.String() + "@"
		q += ` AND substr(claimed, 1, ?) != ?`
		args = append(args, len(prefix), prefix)
	}
	if _, err := tx.ExecContext(ctx, q, args...); err != nil {
		return fmt.Errorf("observer: record unsettleable claims: %w", err)
	}
	for _, h := range hits {
		if slices.Contains(unknown, h.claimed.Channel) {
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO partials(key, src, code, n, hw, first_off, claimed, why, bridged) VALUES(?, ?, ?, ?, -1, ?, ?, ?, ?)`,
			"unsettleable-claim|"+h.claimed.String(), h.src, string(CodeUnsettleableClaim), h.n, h.first, h.claimed.String(), h.name+"\x00"+h.why, h.bridged); err != nil {
			return fmt.Errorf("observer: record unsettleable claims: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("observer: record unsettleable claims: %w", err)
	}
	return nil
}

// collect reads candidate claims rows, each with the claimed channel, the
// values lo..hi (inclusive) that would be wrong on it and the claiming
// channel, and classifies the claims in them on such values, per claimed
// position and claiming channel: the first claiming record and how many
// claim it.
func (u unsettleableClaims) collect(ctx context.Context, offs map[headers.Channel]ChannelOffsets, q string, args ...any) ([]unsettleableHit, error) {
	rows, err := u.s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("observer: find unsettleable claims: %w", err)
	}
	defer rows.Close()
	type pos struct{ ch, value, src int64 }
	found := map[pos]*unsettleableHit{}
	var order []pos
	var pairs []claimPair
	for rows.Next() {
		var topic, blob []byte
		var h unsettleableHit
		var chID, lo, hi, blockLo, start, next, pruned int64
		var kind sql.NullInt64
		if err := rows.Scan(&topic, &h.claimed.Partition, &h.name, &start, &next, &pruned, &chID, &lo, &hi, &kind, &blockLo, &blob, &h.src); err != nil {
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
			k := pos{chID, p.value, h.src}
			if f, ok := found[k]; ok {
				f.n, f.rec = f.n+1, min(f.rec, p.rec)
				continue
			}
			v := p.value
			h := h
			h.claimed.Offset, h.n = v, 1
			co, listed := offs[h.claimed.Channel]
			if h.name == "" && listed {
				h.name = co.Name // a channel only claimed, never consumed
			}
			known := listed && !co.Unknown
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
			h.rec = p.rec
			found[k] = &h
			order = append(order, k)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("observer: find unsettleable claims: %w", err)
	}
	slices.SortFunc(order, func(a, b pos) int {
		return cmp.Or(cmp.Compare(a.ch, b.ch), cmp.Compare(a.value, b.value), cmp.Compare(a.src, b.src))
	})
	hits := make([]unsettleableHit, 0, len(order))
	for _, k := range order {
		h := found[k]
		if err := u.s.db.QueryRowContext(ctx, `SELECT off FROM records WHERE id = ?`, h.rec).Scan(&h.first); err != nil {
			return nil, fmt.Errorf("observer: find unsettleable claims: record #%d: %w", h.rec, err)
		}
		hits = append(hits, *h)
	}
	return hits, nil
}

// hits runs collect over the positions that can be wrong, for the claims
// of the channels this observer owns.
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
	// store. The positions of a channel another observer of the group
	// owns are the ones its owner published (remote_holes).
	const ownClaims = ` AND c.src IN (SELECT id FROM channels WHERE owned)`
	if err := add(`
		SELECT ch.topic, ch.part, ch.name, ch.start_off, ch.next_off, ch.pruned_below, ch.id, r.off, r.off, r.kind, c.lo, c.pairs, c.src
		FROM records r JOIN channels ch ON ch.id = r.ch JOIN claims c ON c.ch = r.ch
			AND c.lo BETWEEN r.off - ` + itoa(claimSpan) + ` AND r.off AND c.hi >= r.off
		WHERE r.kind IN ` + sqlHoleKinds + ` AND ch.owned` + ownClaims); err != nil {
		return nil, err
	}
	if err := add(`
		SELECT ch.topic, ch.part, ch.name, ch.start_off, ch.next_off, ch.pruned_below, ch.id,
			max(g.from_off, ch.pruned_below), g.to_off - 1, NULL, c.lo, c.pairs, c.src
		FROM gaps g CROSS JOIN channels ch CROSS JOIN claims c -- gaps outermost: there are few
		WHERE ch.id = g.ch AND c.ch = g.ch AND c.lo BETWEEN g.from_off - ` + itoa(claimSpan) + ` AND g.to_off - 1
			AND c.hi >= max(g.from_off, ch.pruned_below) AND ch.owned` + ownClaims); err != nil {
		return nil, err
	}
	// A remote hole of kind skipped reads as a range inside its owner's
	// consumed window: (0, to) stands for the window.
	if err := add(`
		SELECT ch.topic, ch.part, ch.name, CASE WHEN h.kind = ` + sqlKindData + ` THEN 0 ELSE -1 END, h.to_off, 0, ch.id,
			h.from_off, h.to_off - 1, CASE WHEN h.kind = ` + sqlKindData + ` THEN NULL ELSE h.kind END, c.lo, c.pairs, c.src
		FROM remote_holes h CROSS JOIN channels ch CROSS JOIN claims c
		WHERE ch.id = h.ch AND NOT ch.owned AND c.ch = h.ch AND c.lo BETWEEN h.from_off - ` + itoa(claimSpan) + ` AND h.to_off - 1
			AND c.hi >= h.from_off` + ownClaims); err != nil {
		return nil, err
	}
	chans, err := u.s.Channels(ctx)
	if err != nil {
		return nil, err
	}
	for _, ci := range chans {
		co, ok := offs[ci.Channel]
		if !ok || co.Unknown {
			continue
		}
		if err := add(`
			SELECT ch.topic, ch.part, ch.name, -1, -1, 0, ch.id, ?, `+itoa(math.MaxInt64)+`, NULL, c.lo, c.pairs, c.src
			FROM channels ch JOIN claims c ON c.ch = ch.id
			WHERE ch.topic = ? AND ch.part = ? AND c.lo >= ? AND c.hi >= ?`+ownClaims,
			co.End, ci.Channel.Topic[:], ci.Channel.Partition, co.End-claimSpan, co.End); err != nil {
			return nil, err
		}
	}
	return hits, nil
}

// finding adds up the partials of one claimed position: the first
// claiming record, in coordinate order, names it.
func (u unsettleableClaims) finding(own *ownership, ps []partialRow, anchor headers.Channel) Finding {
	first := ps[0]
	name, why, _ := strings.Cut(first.why, "\x00")
	n := sumPartials(ps)
	more := ""
	if n > 1 {
		more = fmt.Sprintf(" (and %d more records)", n-1)
	}
	byTopic := own.topicName(first.src.Topic)
	f := Finding{
		Key:  "unsettleable-claim|" + first.claimed,
		Code: CodeUnsettleableClaim, Severity: CodeUnsettleableClaim.Severity(), Topic: byTopic,
		Coordinates: []string{first.first.String(), first.claimed},
		Summary:     fmt.Sprintf("record %s (topic %q)%s claims %s (topic %q), %s", first.first, byTopic, more, first.claimed, name, why),
		Action:      CodeUnsettleableClaim.Action(), Count: int(n), anchor: anchor.String(),
	}
	if first.bridged {
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
	return f
}

// bridgedAction is what to do about a claim on a marker or a skipped
// record: nothing, for Parsley consumers.
const bridgedAction = "nothing for Parsley consumers; a reader that settles claims only on records holds the claiming record until a later record on that channel arrives — have such writers claim only committed record offsets"
