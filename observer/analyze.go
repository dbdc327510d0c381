package observer

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/parsley-go/parsley/headers"
)

// ChannelOffsets are a channel's offsets on the brokers, as listed now.
type ChannelOffsets struct {
	Name   string // topic name
	Start  int64  // log start offset
	Stable int64  // last stable offset: where a read_committed joiner at the end starts
	End    int64  // log end offset (high watermark)
}

// Growth thresholds: a topic needs this many stamped records before its
// stamps are judged, split into quarters by time; entries per record must
// never fall from one quarter to the next and the last quarter's mean must
// be at least growthRatio times the first's plus one entry.
const (
	growthMinRecords = 40
	growthRatio      = 1.5
)

// Findings returns every finding: those detected at ingest, and those
// derived now from the store and offs, the brokers' current offsets (nil
// skips the checks that need them). Findings are ordered by severity,
// highest first, then code and coordinates.
func (s *Store) Findings(ctx context.Context, offs map[headers.Channel]ChannelOffsets) ([]Finding, error) {
	var out []Finding
	steps := []func(context.Context, map[headers.Channel]ChannelOffsets) ([]Finding, error){
		s.storedFindings, s.unsettleable, s.partiallyStamped, s.lateJoiners, s.growth,
	}
	for _, step := range steps {
		fs, err := step(ctx, offs)
		if err != nil {
			return nil, err
		}
		out = append(out, fs...)
	}
	slices.SortStableFunc(out, func(a, b Finding) int {
		if c := cmp.Compare(b.Severity, a.Severity); c != 0 {
			return c
		}
		if c := cmp.Compare(slices.Index(Codes, a.Code), slices.Index(Codes, b.Code)); c != 0 {
			return c
		}
		return slices.Compare(a.Coordinates, b.Coordinates)
	})
	return out, nil
}

func (s *Store) storedFindings(ctx context.Context, _ map[headers.Channel]ChannelOffsets) ([]Finding, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT code, severity, topic, coords, summary, count FROM findings ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("observer: read findings: %w", err)
	}
	defer rows.Close()
	var out []Finding
	for rows.Next() {
		var f Finding
		var coords string
		if err := rows.Scan(&f.Code, &f.Severity, &f.Topic, &coords, &f.Summary, &f.Count); err != nil {
			return nil, fmt.Errorf("observer: read findings: %w", err)
		}
		f.Coordinates = strings.Fields(coords)
		f.Action = f.Code.Action()
		out = append(out, f)
	}
	return out, rows.Err()
}

func (s *Store) coordOfRec(ctx context.Context, rec int64) (headers.Coordinate, string, error) {
	var topic []byte
	var c headers.Coordinate
	var name string
	err := s.db.QueryRowContext(ctx, `SELECT c.topic, c.part, r.off, c.name FROM records r JOIN channels c ON c.id = r.ch WHERE r.id = ?`, rec).
		Scan(&topic, &c.Partition, &c.Offset, &name)
	if err != nil {
		return c, "", fmt.Errorf("observer: record #%d: %w", rec, err)
	}
	copy(c.Topic[:], topic)
	return c, name, nil
}

// unsettleable finds offset claims naming no committed record: a marker,
// an offset skipped by a read_committed fetch (an aborted record), or an
// offset at or past the log end now.
func (s *Store) unsettleable(ctx context.Context, offs map[headers.Channel]ChannelOffsets) ([]Finding, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT ch.topic, ch.part, ch.name, ch.start_off, ch.next_off, ch.pruned_below, c.value, min(c.rec), count(*), r.kind
		FROM claims c JOIN channels ch ON ch.id = c.ch LEFT JOIN records r ON r.ch = c.ch AND r.off = c.value
		GROUP BY c.ch, c.value
		HAVING r.kind IS NULL OR r.kind = 1`)
	if err != nil {
		return nil, fmt.Errorf("observer: find unsettleable claims: %w", err)
	}
	type hit struct {
		claimed headers.Coordinate
		name    string
		rec     int64
		n       int
		why     string
	}
	var hits []hit
	for rows.Next() {
		var topic []byte
		var h hit
		var start, next, pruned int64
		var kind sql.NullInt64
		if err := rows.Scan(&topic, &h.claimed.Partition, &h.name, &start, &next, &pruned, &h.claimed.Offset, &h.rec, &h.n, &kind); err != nil {
			rows.Close()
			return nil, fmt.Errorf("observer: find unsettleable claims: %w", err)
		}
		copy(h.claimed.Topic[:], topic)
		v := h.claimed.Offset
		co, known := offs[h.claimed.Channel]
		switch {
		case kind.Valid && kind.Int64 == kindControl:
			h.why = "a transaction marker"
		case start >= 0 && v >= max(start, pruned) && v < next:
			h.why = "an offset no committed record occupies (an aborted or skipped record)"
		case known && v >= co.End:
			h.why = fmt.Sprintf("an offset at or past the log end (%d)", co.End)
		default:
			continue
		}
		hits = append(hits, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("observer: find unsettleable claims: %w", err)
	}
	var out []Finding
	for _, h := range hits {
		by, byTopic, err := s.coordOfRec(ctx, h.rec)
		if err != nil {
			return nil, err
		}
		more := ""
		if h.n > 1 {
			more = fmt.Sprintf(" (and %d more records)", h.n-1)
		}
		out = append(out, Finding{
			Code: CodeUnsettleableClaim, Severity: CodeUnsettleableClaim.Severity(), Topic: byTopic,
			Coordinates: []string{by.String(), h.claimed.String()},
			Summary:     fmt.Sprintf("record %s (topic %q)%s claims %s (topic %q), %s", by, byTopic, more, h.claimed, h.name, h.why),
			Action:      CodeUnsettleableClaim.Action(), Count: h.n,
		})
	}
	return out, nil
}

func (s *Store) partiallyStamped(ctx context.Context, _ map[headers.Channel]ChannelOffsets) ([]Finding, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT ch.name, sum(r.stamped), count(*),
			min(CASE WHEN r.stamped THEN r.id END), min(CASE WHEN NOT r.stamped THEN r.id END)
		FROM records r JOIN channels ch ON ch.id = r.ch
		WHERE r.kind = 0
		GROUP BY ch.topic
		HAVING sum(r.stamped) > 0 AND sum(r.stamped) < count(*)`)
	if err != nil {
		return nil, fmt.Errorf("observer: find partially stamped topics: %w", err)
	}
	type hit struct {
		name           string
		stamped, n     int
		firstS, firstU int64
	}
	var hits []hit
	for rows.Next() {
		var h hit
		if err := rows.Scan(&h.name, &h.stamped, &h.n, &h.firstS, &h.firstU); err != nil {
			rows.Close()
			return nil, fmt.Errorf("observer: find partially stamped topics: %w", err)
		}
		hits = append(hits, h)
	}
	rows.Close()
	var out []Finding
	for _, h := range hits {
		u, _, err := s.coordOfRec(ctx, h.firstU)
		if err != nil {
			return nil, err
		}
		st, _, err := s.coordOfRec(ctx, h.firstS)
		if err != nil {
			return nil, err
		}
		out = append(out, Finding{
			Code: CodePartiallyStamped, Severity: CodePartiallyStamped.Severity(), Topic: h.name,
			Coordinates: []string{u.String(), st.String()},
			Summary: fmt.Sprintf("topic %q: %d of %d records are stamped; first unstamped %s, first stamped %s",
				h.name, h.stamped, h.n, u, st),
			Action: CodePartiallyStamped.Action(), Count: h.n - h.stamped,
		})
	}
	return out, nil
}

// lateJoiners looks at the newest record of every consumed channel — the
// clock its writer carries forward — for sequence claims whose sender has
// no record at or above the position a consumer joining now would start
// from.
func (s *Store) lateJoiners(ctx context.Context, offs map[headers.Channel]ChannelOffsets) ([]Finding, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT r.id FROM records r JOIN (SELECT ch, max(off) AS off FROM records WHERE kind = 0 AND stamped GROUP BY ch) m
		ON m.ch = r.ch AND m.off = r.off WHERE r.n_seq > 0`)
	if err != nil {
		return nil, fmt.Errorf("observer: find late-joiner windows: %w", err)
	}
	var recs []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("observer: find late-joiner windows: %w", err)
		}
		recs = append(recs, id)
	}
	rows.Close()
	type claimKey struct {
		ch     headers.Channel
		sender headers.SenderID
	}
	type claim struct {
		seq      int64
		carriers []string
	}
	claims := map[claimKey]*claim{}
	var keys []claimKey
	for _, id := range recs {
		rec, err := s.recordByID(ctx, id)
		if err != nil {
			return nil, err
		}
		st, err := rec.Stamp()
		if err != nil {
			continue // reported as undecodable-stamp
		}
		for e := range st.Clock.SeqEntries() {
			k := claimKey{e.Channel, e.Sender}
			c, ok := claims[k]
			if !ok {
				c = &claim{}
				claims[k] = c
				keys = append(keys, k)
			}
			c.seq = max(c.seq, e.Seq)
			c.carriers = append(c.carriers, rec.Coordinate.String())
		}
	}
	slices.SortFunc(keys, func(a, b claimKey) int {
		if c := a.ch.Compare(b.ch); c != 0 {
			return c
		}
		return a.sender.Compare(b.sender)
	})
	var out []Finding
	for _, k := range keys {
		c := claims[k]
		var chName string
		var next int64
		err := s.db.QueryRowContext(ctx, `SELECT name, next_off FROM channels WHERE topic = ? AND part = ?`, k.ch.Topic[:], k.ch.Partition).Scan(&chName, &next)
		if err != nil && err != sql.ErrNoRows {
			return nil, fmt.Errorf("observer: late-joiner window on %s: %w", k.ch, err)
		}
		join, end := next, next
		if co, ok := offs[k.ch]; ok {
			join, end = co.Stable, co.End
		}
		var last, claimedOff sql.NullInt64
		err = s.db.QueryRowContext(ctx, `
			SELECT (SELECT max(r.off) FROM records r WHERE r.ch = ch.id AND r.tagged AND r.sender = sd.id),
			       (SELECT min(r.off) FROM records r WHERE r.ch = ch.id AND r.tagged AND r.sender = sd.id AND r.seq >= ?)
			FROM channels ch, senders sd WHERE ch.topic = ? AND ch.part = ? AND sd.sender = ?`,
			c.seq, k.ch.Topic[:], k.ch.Partition, k.sender[:]).Scan(&last, &claimedOff)
		if err != nil && err != sql.ErrNoRows {
			return nil, fmt.Errorf("observer: late-joiner window on %s: %w", k.ch, err)
		}
		if last.Valid && last.Int64 >= join {
			continue // the sender writes at or above the join point: a joiner resolves the claim
		}
		f := Finding{
			Code: CodeLateJoinerWindow, Severity: CodeLateJoinerWindow.Severity(), Topic: chName,
			Coordinates: slices.Compact(slices.Sorted(slices.Values(c.carriers))),
			Action:      CodeLateJoinerWindow.Action(), Count: len(c.carriers),
		}
		lastTxt := "no record seen"
		if last.Valid {
			lastTxt = fmt.Sprintf("last record at offset %d", last.Int64)
		}
		if claimedOff.Valid {
			claimed := headers.Coordinate{Channel: k.ch, Offset: claimedOff.Int64}
			f.Coordinates = append(f.Coordinates, claimed.String())
			f.SafeJoin = map[string]int64{k.ch.String(): claimedOff.Int64}
			f.Summary = fmt.Sprintf("sequence claim on %s (topic %q) of sender %s up to seq %d still circulates (%s); the sender's %s, below the last stable offset %d (log end %d): a consumer joining at either holds forever; safe join offset %d",
				k.ch, chName, k.sender, c.seq, strings.Join(c.carriers, ", "), lastTxt, join, end, claimedOff.Int64)
		} else {
			f.Summary = fmt.Sprintf("sequence claim on %s (topic %q) of sender %s up to seq %d still circulates (%s); the sender's %s, below the last stable offset %d (log end %d), and the claimed record was never seen: no safe join offset is known",
				k.ch, chName, k.sender, c.seq, strings.Join(c.carriers, ", "), lastTxt, join, end)
		}
		out = append(out, f)
	}
	return out, nil
}

func (s *Store) recordByID(ctx context.Context, id int64) (*Record, error) {
	r, err := scanRecord(s.db.QueryRowContext(ctx, `SELECT `+recordCols+recordFrom+`WHERE r.id = ?`, id))
	if err != nil {
		return nil, fmt.Errorf("observer: record #%d: %w", id, err)
	}
	return r, nil
}

// growth compares mean stamp width and header bytes across the four
// quarters (by time) of each topic's stamped records.
func (s *Store) growth(ctx context.Context, _ map[headers.Channel]ChannelOffsets) ([]Finding, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT name, q, avg(n), avg(b), count(*), min(id), max(id) FROM (
			SELECT ch.name AS name, r.n_off + r.n_seq AS n, r.hdr_bytes AS b, r.id AS id,
				ntile(4) OVER (PARTITION BY ch.topic ORDER BY r.ts, r.id) AS q,
				count(*) OVER (PARTITION BY ch.topic) AS total
			FROM records r JOIN channels ch ON ch.id = r.ch
			WHERE r.kind = 0 AND r.stamped AND r.err IS NULL)
		WHERE total >= ? GROUP BY name, q ORDER BY name, q`, growthMinRecords)
	if err != nil {
		return nil, fmt.Errorf("observer: find stamp growth: %w", err)
	}
	type quarter struct {
		n, b        float64
		count       int
		first, last int64
	}
	byTopic := map[string][]quarter{}
	var names []string
	for rows.Next() {
		var name string
		var q int
		var qt quarter
		if err := rows.Scan(&name, &q, &qt.n, &qt.b, &qt.count, &qt.first, &qt.last); err != nil {
			rows.Close()
			return nil, fmt.Errorf("observer: find stamp growth: %w", err)
		}
		if _, ok := byTopic[name]; !ok {
			names = append(names, name)
		}
		byTopic[name] = append(byTopic[name], qt)
	}
	rows.Close()
	var out []Finding
	for _, name := range names {
		qs := byTopic[name]
		if len(qs) != 4 {
			continue
		}
		rising := true
		for i := 1; i < 4; i++ {
			if qs[i].n < qs[i-1].n || qs[i].b < qs[i-1].b {
				rising = false
			}
		}
		if !rising || qs[3].n < growthRatio*qs[0].n+1 {
			continue
		}
		first, _, err := s.coordOfRec(ctx, qs[0].first)
		if err != nil {
			return nil, err
		}
		last, _, err := s.coordOfRec(ctx, qs[3].last)
		if err != nil {
			return nil, err
		}
		total := qs[0].count + qs[1].count + qs[2].count + qs[3].count
		out = append(out, Finding{
			Code: CodeStampGrowth, Severity: CodeStampGrowth.Severity(), Topic: name,
			Coordinates: []string{last.String(), first.String()},
			Summary: fmt.Sprintf("topic %q: mean stamp entries per record rose %.1f → %.1f → %.1f → %.1f and header bytes %.0f → %.0f over %d records (quarters by time)",
				name, qs[0].n, qs[1].n, qs[2].n, qs[3].n, qs[0].b, qs[3].b, total),
			Action: CodeStampGrowth.Action(), Count: total,
		})
	}
	return out, nil
}
