package observer

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/parsley-go/parsley/headers"
)

// ChannelOffsets are a channel's offsets on the brokers, as listed now.
type ChannelOffsets struct {
	Name   string // topic name
	Start  int64  // log start offset
	Stable int64  // last stable offset: where a read_committed joiner at the end starts
	End    int64  // log end offset (high watermark)
	// Unknown: the channel exists but the brokers did not list its offsets
	// now (its leader moving, say), and the offsets above are zero. No
	// finding that depends on them is judged: one found before stays as
	// it was until they are known again.
	Unknown bool
}

// Growth thresholds: a topic needs this many stamped records before its
// stamps are judged, split into quarters by time; entries per record must
// never fall from one quarter to the next, the last quarter's mean must be
// at least growthRatio times the first's plus one entry, and the growth
// must be sustained: each quarter must add at least growthStepShare of the
// whole rise. A producer's clock filling to its channels at start-up rises
// in the first quarter and then levels off (4.4 → 7.9 → 8.0 → 8.0); that
// is warm-up, not growth.
const (
	growthMinRecords = 40
	growthRatio      = 1.5
	growthStepShare  = 0.1
)

// sustainedGrowth reports whether quarterly means rise steadily enough to
// warn about: never falling, ending at least growthRatio times the start
// plus one, and rising in every quarter by growthStepShare of the whole
// rise.
func sustainedGrowth(mean [4]float64) bool {
	rise := mean[3] - mean[0]
	if mean[3] < growthRatio*mean[0]+1 {
		return false
	}
	for i := 1; i < len(mean); i++ {
		if mean[i]-mean[i-1] < growthStepShare*rise {
			return false
		}
	}
	return true
}

// rule derives findings from the store and the brokers' current offsets
// (nil when unknown): those anchored at channels this observer owns.
type rule interface {
	find(ctx context.Context, offs map[headers.Channel]ChannelOffsets, own *ownership) ([]Finding, error)
}

// ruleFunc is a rule written as a function.
type ruleFunc func(ctx context.Context, offs map[headers.Channel]ChannelOffsets, own *ownership) ([]Finding, error)

func (f ruleFunc) find(ctx context.Context, offs map[headers.Channel]ChannelOffsets, own *ownership) ([]Finding, error) {
	return f(ctx, offs, own)
}

// rules lists every rule evaluated from the store and the brokers'
// offsets; the findings detected at ingest are stored as they are found.
// A new finding is a rule in a file of its own and one line here, and a
// key that names what the finding is about.
func (s *Store) rules() []rule {
	return []rule{
		unsettleableClaims{s},
		ruleFunc(s.partiallyStamped),
		ruleFunc(s.lateJoiners),
		ruleFunc(s.growth),
	}
}

// Findings returns every finding in every state: those detected at
// ingest, and those the rules derive now from the store and offs, the
// brokers' current offsets (nil skips the checks that need them).
// Evaluated on a writable store it records the evaluation (see
// lifecycle.go): new findings are stored open, and, when offs are known,
// findings whose condition no longer holds are resolved. Findings are
// ordered by severity, highest first, then code and coordinates.
func (s *Store) Findings(ctx context.Context, offs map[headers.Channel]ChannelOffsets) ([]Finding, error) {
	return s.evaluate(ctx, offs, time.Now(), 0)
}

// evaluate is Findings, dropping findings resolved longer than retention
// ago (0 keeps them).
func (s *Store) evaluate(ctx context.Context, offs map[headers.Channel]ChannelOffsets, now time.Time, retention time.Duration) ([]Finding, error) {
	own, err := s.ownership(ctx)
	if err != nil {
		return nil, err
	}
	var derived []Finding
	keys := map[string]bool{}
	for _, r := range s.rules() {
		fs, err := r.find(ctx, offs, own)
		if err != nil {
			return nil, err
		}
		for _, f := range fs {
			if !keys[f.Key] { // one finding per key, the first a rule gives
				keys[f.Key] = true
				derived = append(derived, f)
			}
		}
	}
	counted, err := s.crossPartitionFindings(ctx, own)
	if err != nil {
		return nil, err
	}
	if !s.readOnly {
		if err := s.reconcile(ctx, derived, counted, offs, offs != nil, now, retention, own); err != nil {
			return nil, err
		}
	}
	stored, _, err := s.readFindings(ctx, s.db)
	if err != nil {
		return nil, err
	}
	out := make([]Finding, 0, len(stored))
	for _, f := range stored {
		out = append(out, f)
	}
	if s.readOnly {
		// Nothing is recorded: what the rules find now, over what was
		// recorded by the last writer.
		for _, f := range append(derived, counted...) {
			if _, ok := stored[f.Key]; !ok {
				f.State = StateOpen
				out = append(out, f)
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Finding) int {
		if c := cmp.Compare(b.Severity, a.Severity); c != 0 {
			return c
		}
		if c := cmp.Compare(a.Code.rank(), b.Code.rank()); c != 0 {
			return c
		}
		return cmp.Or(slices.Compare(a.Coordinates, b.Coordinates), cmp.Compare(a.ID, b.ID))
	})
	names, err := s.Names(ctx)
	if err != nil {
		return nil, err
	}
	for i := range out {
		out[i] = names.Named(out[i])
	}
	return out, nil
}

func (s *Store) partiallyStamped(ctx context.Context, _ map[headers.Channel]ChannelOffsets, own *ownership) ([]Finding, error) {
	// Per channel first, added up per topic below: each channel's counts
	// come from its owner, and "the first stamped record" is the first in
	// coordinate order, whoever ingested it.
	rows, err := s.db.QueryContext(ctx, `
		SELECT st.ch, sum(st.n_stamped + st.n_undecodable), sum(st.n_data), min(st.first_stamped), min(st.first_unstamped)
		FROM all_stats st GROUP BY st.ch`)
	if err != nil {
		return nil, fmt.Errorf("observer: find partially stamped topics: %w", err)
	}
	type hit struct {
		stamped, n     int
		firstS, firstU *headers.Coordinate
	}
	byTopic := map[headers.TopicID]*hit{}
	var topics []headers.TopicID
	earlier := func(cur **headers.Coordinate, ch headers.Channel, off sql.NullInt64) {
		if !off.Valid {
			return
		}
		c := headers.Coordinate{Channel: ch, Offset: off.Int64}
		if *cur == nil || coordCompare(c, **cur) < 0 {
			*cur = &c
		}
	}
	for rows.Next() {
		var id int64
		var stamped, n int
		var firstS, firstU sql.NullInt64
		if err := rows.Scan(&id, &stamped, &n, &firstS, &firstU); err != nil {
			rows.Close()
			return nil, fmt.Errorf("observer: find partially stamped topics: %w", err)
		}
		ch, ok := own.ch[id]
		if !ok {
			continue
		}
		h := byTopic[ch.Topic]
		if h == nil {
			h = &hit{}
			byTopic[ch.Topic] = h
			topics = append(topics, ch.Topic)
		}
		h.stamped, h.n = h.stamped+stamped, h.n+n
		earlier(&h.firstS, ch, firstS)
		earlier(&h.firstU, ch, firstU)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("observer: find partially stamped topics: %w", err)
	}
	slices.SortFunc(topics, func(a, b headers.TopicID) int { return a.CompareBytes(b) })
	var out []Finding
	for _, t := range topics {
		h := byTopic[t]
		anchor := headers.Channel{Topic: t, Partition: 0}
		if h.stamped == 0 || h.stamped >= h.n || !own.ownsChannel(anchor) {
			continue
		}
		name := own.topicName(t)
		var coords []string
		var named [2]string
		for i, c := range []*headers.Coordinate{h.firstU, h.firstS} {
			if c != nil {
				coords = append(coords, c.String())
				named[i] = c.String()
			}
		}
		out = append(out, Finding{
			Key:  "partially-stamped-topic|" + name,
			Code: CodePartiallyStamped, Severity: CodePartiallyStamped.Severity(), Topic: name,
			Coordinates: coords,
			Summary: fmt.Sprintf("topic %q: %d of %d records are stamped; first unstamped %s, first stamped %s",
				name, h.stamped, h.n, or(named[0], "(pruned)"), or(named[1], "(pruned)")),
			Action: CodePartiallyStamped.Action(), Count: h.n - h.stamped, anchor: anchor.String(),
		})
	}
	return out, nil
}

func or(s, alt string) string {
	if s == "" {
		return alt
	}
	return s
}

// lateJoiners looks at the newest stamped record of every observed
// channel — the clock its writer carries forward — for sequence claims
// whose sender has no record at or above the position a consumer joining
// now would start from. The newest records of the channels this observer
// owns are in its store; those of the others, as their owners published
// them (shard.go).
func (s *Store) lateJoiners(ctx context.Context, offs map[headers.Channel]ChannelOffsets, own *ownership) ([]Finding, error) {
	type carrier struct {
		at    headers.Coordinate
		stamp *headers.Stamp
	}
	var carriers []carrier
	// The newest stamped record of each owned channel, read backwards
	// through the (channel, offset) index.
	rows, err := s.db.QueryContext(ctx, `
		SELECT (SELECT r.id FROM records r WHERE r.ch = ch.id AND r.kind = `+sqlKindData+` AND r.stamped ORDER BY r.off DESC LIMIT 1)
		FROM channels ch WHERE ch.start_off >= 0 AND ch.owned`)
	if err != nil {
		return nil, fmt.Errorf("observer: find late-joiner windows: %w", err)
	}
	var recs []int64
	for rows.Next() {
		var id sql.NullInt64
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("observer: find late-joiner windows: %w", err)
		}
		if id.Valid {
			recs = append(recs, id.Int64)
		}
	}
	rows.Close()
	for _, id := range recs {
		rec, err := s.recordByID(ctx, id)
		if err != nil {
			return nil, err
		}
		if st, err := rec.Stamp(); err == nil { // else reported as undecodable-stamp
			carriers = append(carriers, carrier{rec.Coordinate, st})
		}
	}
	rows, err = s.db.QueryContext(ctx, `SELECT rc.ch, rc.tail_off, rc.tail FROM remote_channels rc JOIN channels c ON c.id = rc.ch
		WHERE NOT c.owned AND rc.tail_off >= 0`)
	if err != nil {
		return nil, fmt.Errorf("observer: find late-joiner windows: %w", err)
	}
	for rows.Next() {
		var id, off int64
		var tail []byte
		if err := rows.Scan(&id, &off, &tail); err != nil {
			rows.Close()
			return nil, fmt.Errorf("observer: find late-joiner windows: %w", err)
		}
		st := new(headers.Stamp)
		if ch, ok := own.ch[id]; ok && readStoredStamp(st, tail) == nil {
			carriers = append(carriers, carrier{headers.Coordinate{Channel: ch, Offset: off}, st})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("observer: find late-joiner windows: %w", err)
	}
	type claimKey struct {
		ch     headers.Channel
		sender headers.SenderID
	}
	type claim struct {
		seq      int64
		carriers []headers.Coordinate
	}
	claims := map[claimKey]*claim{}
	var keys []claimKey
	for _, c := range carriers {
		for e := range c.stamp.Clock.SeqEntries() {
			k := claimKey{e.Channel, e.Sender}
			cl, ok := claims[k]
			if !ok {
				cl = &claim{}
				claims[k] = cl
				keys = append(keys, k)
			}
			cl.seq = max(cl.seq, e.Seq)
			cl.carriers = append(cl.carriers, c.at)
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
		slices.SortFunc(c.carriers, coordCompare)
		// Anchored at the claimed channel, or, when no observer reads it,
		// at the first carrier's.
		anchor := k.ch
		if !own.observedChannel(anchor) {
			anchor = c.carriers[0].Channel
		}
		if !own.ownsChannel(anchor) {
			continue
		}
		var chName string
		var next int64
		err := s.db.QueryRowContext(ctx, `SELECT name, next_off FROM channels WHERE topic = ? AND part = ?`, k.ch.Topic[:], k.ch.Partition).Scan(&chName, &next)
		if err != nil && err != sql.ErrNoRows {
			return nil, fmt.Errorf("observer: late-joiner window on %s: %w", k.ch, err)
		}
		join, end := next, next
		if co, ok := offs[k.ch]; ok && co.Unknown {
			continue // judged again once its offsets are known
		} else if ok {
			join, end = co.Stable, co.End
			chName = cmp.Or(chName, co.Name)
		}
		// The sender's last record on the channel, and its first record at
		// or above the claimed sequence number.
		var last, claimedOff sql.NullInt64
		var chID, senderID sql.NullInt64
		err = s.db.QueryRowContext(ctx, `SELECT (SELECT id FROM channels WHERE topic = ? AND part = ?), (SELECT id FROM senders WHERE sender = ?)`,
			k.ch.Topic[:], k.ch.Partition, k.sender[:]).Scan(&chID, &senderID)
		if err != nil {
			return nil, fmt.Errorf("observer: late-joiner window on %s: %w", k.ch, err)
		}
		if chID.Valid && senderID.Valid {
			err := s.db.QueryRowContext(ctx, `SELECT max(last_off) FROM seqs WHERE ch = ? AND sender = ?`, chID.Int64, senderID.Int64).Scan(&last)
			if err != nil {
				return nil, fmt.Errorf("observer: late-joiner window on %s: %w", k.ch, err)
			}
			off, ok, err := firstAtOrAbove(ctx, s.db, chID.Int64, senderID.Int64, c.seq)
			if err != nil {
				return nil, fmt.Errorf("observer: late-joiner window on %s: %w", k.ch, err)
			}
			claimedOff = sql.NullInt64{Int64: off, Valid: ok}
		}
		if last.Valid && last.Int64 >= join {
			continue // the sender writes at or above the join point: a joiner resolves the claim
		}
		var carried []string
		for _, at := range slices.CompactFunc(c.carriers, func(a, b headers.Coordinate) bool { return a == b }) {
			carried = append(carried, at.String())
		}
		f := Finding{
			Key:  "late-joiner-window|" + k.ch.String() + "|" + k.sender.String(),
			Code: CodeLateJoinerWindow, Severity: CodeLateJoinerWindow.Severity(), Topic: chName,
			Coordinates: carried,
			Action:      CodeLateJoinerWindow.Action(), Count: len(c.carriers), anchor: anchor.String(),
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
				k.ch, chName, k.sender, c.seq, strings.Join(carried, ", "), lastTxt, join, end, claimedOff.Int64)
		} else {
			f.Summary = fmt.Sprintf("sequence claim on %s (topic %q) of sender %s up to seq %d still circulates (%s); the sender's %s, below the last stable offset %d (log end %d), and the claimed record was never seen: no safe join offset is known",
				k.ch, chName, k.sender, c.seq, strings.Join(carried, ", "), lastTxt, join, end)
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
// quarters (by time) of each topic's stamped records. It reads the
// per-run statistics (64 offsets a run), or, for a topic with fewer than
// growthFineBelow runs, the records themselves, so small topics are judged
// as finely as large ones. Runs and records are ordered by time, then by
// coordinate, so the quarters are the same whoever ingested them.
func (s *Store) growth(ctx context.Context, _ map[headers.Channel]ChannelOffsets, own *ownership) ([]Finding, error) {
	byTopic := map[string][]part{}
	var names []string
	rows, err := s.db.QueryContext(ctx, `
		SELECT st.ch, st.n_stamped, st.sum_entries, st.sum_bytes, st.min_ts, st.first_stamped, st.last_stamped
		FROM all_stats st WHERE st.n_stamped > 0`)
	if err != nil {
		return nil, fmt.Errorf("observer: find stamp growth: %w", err)
	}
	for rows.Next() {
		var id, first, last int64
		var p part
		if err := rows.Scan(&id, &p.n, &p.entries, &p.bytes, &p.ts, &first, &last); err != nil {
			rows.Close()
			return nil, fmt.Errorf("observer: find stamp growth: %w", err)
		}
		ch, ok := own.ch[id]
		if !ok {
			continue
		}
		p.first, p.last = headers.Coordinate{Channel: ch, Offset: first}, headers.Coordinate{Channel: ch, Offset: last}
		name := own.name[id]
		if _, ok := byTopic[name]; !ok {
			names = append(names, name)
		}
		byTopic[name] = append(byTopic[name], p)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("observer: find stamp growth: %w", err)
	}
	slices.Sort(names)
	var out []Finding
	for _, name := range names {
		parts := byTopic[name]
		var total float64
		for _, p := range parts {
			total += p.n
		}
		if total < growthMinRecords {
			continue
		}
		if len(parts) < growthFineBelow {
			if parts, err = s.recordParts(ctx, own, name); err != nil {
				return nil, err
			}
		}
		slices.SortStableFunc(parts, func(a, b part) int { return cmp.Or(cmp.Compare(a.ts, b.ts), coordCompare(a.first, b.first)) })
		anchor := headers.Channel{Topic: parts[0].first.Topic, Partition: 0}
		if !own.ownsChannel(anchor) {
			continue
		}
		// Quarters by cumulative record count.
		var qs [4]struct {
			n, entries, bytes float64
			first, last       headers.Coordinate
		}
		var seen float64
		for _, p := range parts {
			q := min(3, int(4*seen/total))
			seen += p.n
			if qs[q].n == 0 {
				qs[q].first = p.first
			}
			qs[q].n += p.n
			qs[q].entries += p.entries
			qs[q].bytes += p.bytes
			qs[q].last = p.last
		}
		var mean, bytes [4]float64
		rising := true
		for i := range qs {
			if qs[i].n == 0 {
				rising = false
				break
			}
			mean[i], bytes[i] = qs[i].entries/qs[i].n, qs[i].bytes/qs[i].n
			if i > 0 && bytes[i] < bytes[i-1] {
				rising = false
			}
		}
		if !rising || !sustainedGrowth(mean) {
			continue
		}
		out = append(out, Finding{
			Key:  "stamp-growth|" + name,
			Code: CodeStampGrowth, Severity: CodeStampGrowth.Severity(), Topic: name,
			Coordinates: []string{qs[3].last.String(), qs[0].first.String()},
			Summary: fmt.Sprintf("topic %q: mean stamp entries per record rose %.1f → %.1f → %.1f → %.1f and header bytes %.0f → %.0f over %.0f records (quarters by time)",
				name, mean[0], mean[1], mean[2], mean[3], bytes[0], bytes[3], total),
			Action: CodeStampGrowth.Action(), Count: int(total), anchor: anchor.String(),
		})
	}
	return out, nil
}

// part is a stretch of a topic's stamped records: a statistics run, or
// one record.
type part struct {
	n, entries, bytes float64
	ts                int64
	first, last       headers.Coordinate
}

// growthFineBelow: a topic with fewer statistics runs than this is judged
// record by record.
const growthFineBelow = 64

// recordParts returns a topic's stamped records as one-record parts: from
// the store for the channels this observer owns, as their owners published
// them for the others.
func (s *Store) recordParts(ctx context.Context, own *ownership, name string) ([]part, error) {
	rows, err := s.db.QueryContext(ctx, `
		SELECT ch.id, r.off, r.n_off + r.n_seq, r.hdr_bytes, r.ts FROM records r JOIN channels ch ON ch.id = r.ch
		WHERE ch.name = ? AND ch.owned AND r.kind = `+sqlKindData+` AND r.stamped AND r.err IS NULL`, name)
	if err != nil {
		return nil, fmt.Errorf("observer: stamp growth of %q: %w", name, err)
	}
	defer rows.Close()
	var out []part
	for rows.Next() {
		var id, off, e, b, ts int64
		if err := rows.Scan(&id, &off, &e, &b, &ts); err != nil {
			return nil, fmt.Errorf("observer: stamp growth of %q: %w", name, err)
		}
		at := headers.Coordinate{Channel: own.ch[id], Offset: off}
		out = append(out, part{1, float64(e), float64(b), ts, at, at})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("observer: stamp growth of %q: %w", name, err)
	}
	rows.Close()
	fine, err := s.db.QueryContext(ctx, `SELECT f.ch, f.parts FROM remote_fine f JOIN channels ch ON ch.id = f.ch WHERE ch.name = ? AND NOT ch.owned`, name)
	if err != nil {
		return nil, fmt.Errorf("observer: stamp growth of %q: %w", name, err)
	}
	defer fine.Close()
	for fine.Next() {
		var id int64
		var b []byte
		if err := fine.Scan(&id, &b); err != nil {
			return nil, fmt.Errorf("observer: stamp growth of %q: %w", name, err)
		}
		if out, err = appendFineParts(out, own.ch[id], b); err != nil {
			return nil, fmt.Errorf("observer: stamp growth of %q: %w", name, err)
		}
	}
	return out, fine.Err()
}
