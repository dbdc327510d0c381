package observer

// The facts a shard publishes to its group's state topic, and how a shard
// applies the facts the others publish (see shard.go for the design).
//
// A fact is a record of the state topic, compacted by key, whose value is
// JSON and whose header "o" names the shard (instance) that wrote it; an
// empty value deletes it. Keys:
//
//	m|INSTANCE              a member: the URL its web server answers at
//	c|CHANNEL               a channel its owner reads: name, consumed range, newest stamped record
//	r|CHANNEL|BUCKET        a statistics run (64 offsets) of a channel
//	h|CHANNEL|CHUNK         the holes (markers, aborted and skipped offsets) of 65,536 offsets
//	f|CHANNEL               the one-record parts of a small channel (stamp growth)
//	p|CHANNEL|FINDINGKEY    a channel's partial of a finding about several channels
//	F|FINDINGKEY            a finding, by the shard that records it
//	A|FINDINGKEY            an acknowledgement, by whichever shard took it
//
// CHANNEL is headers.Channel.String(), topic ID and partition.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/parsley-go/parsley/headers"
)

const (
	factMember   = "m|"
	factChannel  = "c|"
	factRun      = "r|"
	factHoles    = "h|"
	factFine     = "f|"
	factPartial  = "p|"
	factFinding  = "F|"
	factAck      = "A|"
	factOwnerKey = "o" // the header naming the fact's writer
)

// holeChunkBits sizes the ranges holes are published in.
const holeChunkBits = 16

// fact is one record of the state topic.
type fact struct {
	key   string
	owner string
	value []byte // nil: deleted
}

type memberFact struct {
	URL string `json:"url"`
	At  int64  `json:"at"`
}

type channelFact struct {
	Name    string `json:"name"`
	Start   int64  `json:"start"`
	Next    int64  `json:"next"`
	Pruned  int64  `json:"pruned"`
	TailOff int64  `json:"tail_off"` // -1: no stamped record
	Tail    []byte `json:"tail,omitempty"`
}

type runFact struct {
	Data, Marker, Stamped, Undecodable int64
	Entries, MaxEntries, Bytes, MinTS  int64
	FirstStamped, FirstUnstamped       *int64 `json:",omitempty"`
	LastStamped                        *int64 `json:",omitempty"`
}

type holesFact struct {
	Holes [][3]int64 `json:"holes"` // from, to (exclusive), kind: 0 skipped, 1 marker, 2 aborted
}

type fineFact struct {
	Parts []byte `json:"parts"`
}

type partialFact struct {
	Code    Code   `json:"code"`
	N       int64  `json:"n"`
	HW      int64  `json:"hw"`
	First   int64  `json:"first"`
	Claimed string `json:"claimed"`
	Why     string `json:"why"`
	Bridged bool   `json:"bridged,omitempty"`
}

type findingFact struct {
	Derived     bool             `json:"derived"`
	Code        Code             `json:"code"`
	Severity    Severity         `json:"severity"`
	Topic       string           `json:"topic"`
	Coords      string           `json:"coords"`
	Summary     string           `json:"summary"`
	Count       int              `json:"count"`
	SafeJoin    string           `json:"safe_join,omitempty"`
	First       int64            `json:"first"`
	Last        int64            `json:"last"`
	ResolvedAt  *int64           `json:"resolved_at,omitempty"`
	ResolvedWhy string           `json:"resolved_why,omitempty"`
	AckAt       *int64           `json:"ack_at,omitempty"`
	AckBy       string           `json:"ack_by,omitempty"`
	AckReason   string           `json:"ack_reason,omitempty"`
	Anchor      string           `json:"anchor"`
	Epoch       int64            `json:"epoch"`
	HW          int64            `json:"hw"`
	History     []findingEventDB `json:"history,omitempty"`
}

type findingEventDB struct {
	At   int64  `json:"at"`
	What string `json:"what"`
	Who  string `json:"who,omitempty"`
	Why  string `json:"why,omitempty"`
}

type ackFact struct {
	By     string `json:"by"`
	Reason string `json:"reason"`
	At     int64  `json:"at"`
	Epoch  int64  `json:"epoch"`
}

// errBadFact is wrapped when a state topic record cannot be applied.
var errBadFact = errors.New("malformed state topic record")

// parseChannel reads a channel's text, "TOPICID/PARTITION".
func parseChannel(s string) (headers.Channel, error) {
	ref, err := ParseRef(s + "@0")
	if err != nil || !ref.ByID {
		return headers.Channel{}, fmt.Errorf("%w: channel %q", errBadFact, s)
	}
	return headers.Channel{Topic: ref.ID, Partition: ref.Partition}, nil
}

// channelID returns the store id of ch, adding it (neither assigned nor
// owned) when the store does not know it yet.
func channelID(ctx context.Context, tx *sql.Tx, ch headers.Channel, name string) (int64, error) {
	var id int64
	err := tx.QueryRowContext(ctx, `SELECT id FROM channels WHERE topic = ? AND part = ?`, ch.Topic[:], ch.Partition).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		res, err := tx.ExecContext(ctx, `INSERT INTO channels(topic, part, name, owned, assigned) VALUES(?, ?, ?, 0, 0)`, ch.Topic[:], ch.Partition, name)
		if err != nil {
			return 0, err
		}
		return res.LastInsertId()
	}
	if err == nil && name != "" {
		_, err = tx.ExecContext(ctx, `UPDATE channels SET name = ? WHERE id = ? AND name = ''`, name, id)
	}
	return id, err
}

// resetMirror forgets what the store read from the state topic, which a
// shard reads again from its start when it starts, and every channel's
// assignment, which the group gives again.
func (s *Store) resetMirror(ctx context.Context) error {
	_, err := s.db.ExecContext(ctx, `
		DELETE FROM facts; DELETE FROM remote_channels; DELETE FROM remote_stats; DELETE FROM remote_holes;
		DELETE FROM remote_fine; DELETE FROM members;
		UPDATE channels SET assigned = 0, owned = 0;`)
	if err != nil {
		return fmt.Errorf("observer: reset the group's state: %w", err)
	}
	return nil
}

// applyFacts applies state topic records in one transaction: every fact
// is kept in the facts table and updates what it describes, except a
// channel's facts and the findings anchored at channels assigned here, of
// which this shard is the writer now (a late fact from a former owner
// must not overwrite them). A shard's own facts apply too: once a channel
// moves away they are what it knows of the channel, until the new owner
// publishes.
func (s *Store) applyFacts(ctx context.Context, fs []fact) error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("observer: apply the group's state: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `UPDATE meta SET v = v WHERE k = 'schema'`); err != nil { // take the write lock first
		return fmt.Errorf("observer: apply the group's state: %w", err)
	}
	for _, f := range fs {
		if f.value == nil {
			_, err = tx.ExecContext(ctx, `DELETE FROM facts WHERE key = ?`, f.key)
		} else {
			_, err = tx.ExecContext(ctx, `INSERT INTO facts(key, owner, value) VALUES(?, ?, ?) ON CONFLICT(key) DO UPDATE SET owner = excluded.owner, value = excluded.value`,
				f.key, f.owner, f.value)
		}
		if err != nil {
			return fmt.Errorf("observer: apply the group's state: %w", err)
		}
		if err := applyFact(ctx, tx, f); err != nil {
			return fmt.Errorf("observer: apply state record %q: %w", f.key, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("observer: apply the group's state: %w", err)
	}
	return nil
}

// assignedHere reports whether ch is assigned to this store's observer.
func assignedHere(ctx context.Context, tx *sql.Tx, ch headers.Channel) bool {
	var a bool
	tx.QueryRowContext(ctx, `SELECT assigned FROM channels WHERE topic = ? AND part = ?`, ch.Topic[:], ch.Partition).Scan(&a)
	return a
}

func applyFact(ctx context.Context, tx *sql.Tx, f fact) error {
	kind, rest, _ := strings.Cut(f.key, "|")
	kind += "|"
	switch kind {
	case factMember:
		if f.value == nil {
			_, err := tx.ExecContext(ctx, `DELETE FROM members WHERE instance = ?`, rest)
			return err
		}
		var m memberFact
		if err := json.Unmarshal(f.value, &m); err != nil {
			return fmt.Errorf("%w: %v", errBadFact, err)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO members(instance, url, at) VALUES(?, ?, ?) ON CONFLICT(instance) DO UPDATE SET url = excluded.url, at = excluded.at`,
			rest, m.URL, m.At)
		return err
	case factFinding:
		return applyFindingFact(ctx, tx, rest, f.value)
	case factAck:
		return applyAckFact(ctx, tx, rest, f.value)
	}
	// The rest describe one channel, named first.
	chText, sub, _ := strings.Cut(rest, "|")
	ch, err := parseChannel(chText)
	if err != nil {
		return err
	}
	if assignedHere(ctx, tx, ch) {
		return nil
	}
	switch kind {
	case factChannel:
		return applyChannelFact(ctx, tx, ch, f.owner, f.value)
	case factRun:
		return applyRunFact(ctx, tx, ch, sub, f.value)
	case factHoles:
		return applyHolesFact(ctx, tx, ch, sub, f.value)
	case factFine:
		id, err := channelID(ctx, tx, ch, "")
		if err != nil {
			return err
		}
		if f.value == nil {
			_, err = tx.ExecContext(ctx, `DELETE FROM remote_fine WHERE ch = ?`, id)
			return err
		}
		var v fineFact
		if err := json.Unmarshal(f.value, &v); err != nil {
			return fmt.Errorf("%w: %v", errBadFact, err)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO remote_fine(ch, parts) VALUES(?, ?) ON CONFLICT(ch) DO UPDATE SET parts = excluded.parts`, id, v.Parts)
		return err
	case factPartial:
		id, err := channelID(ctx, tx, ch, "")
		if err != nil {
			return err
		}
		if f.value == nil {
			_, err = tx.ExecContext(ctx, `DELETE FROM partials WHERE key = ? AND src = ?`, sub, id)
			return err
		}
		var p partialFact
		if err := json.Unmarshal(f.value, &p); err != nil {
			return fmt.Errorf("%w: %v", errBadFact, err)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO partials(key, src, code, n, hw, first_off, claimed, why, bridged) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT(key, src) DO UPDATE SET code = excluded.code, n = excluded.n, hw = excluded.hw, first_off = excluded.first_off,
				claimed = excluded.claimed, why = excluded.why, bridged = excluded.bridged`,
			sub, id, string(p.Code), p.N, p.HW, p.First, p.Claimed, p.Why, p.Bridged)
		return err
	}
	return nil // a kind of fact this version does not know: kept in facts, otherwise ignored
}

func applyChannelFact(ctx context.Context, tx *sql.Tx, ch headers.Channel, owner string, value []byte) error {
	if value == nil {
		_, err := tx.ExecContext(ctx, `DELETE FROM remote_channels WHERE ch = (SELECT id FROM channels WHERE topic = ? AND part = ?)`, ch.Topic[:], ch.Partition)
		return err
	}
	var c channelFact
	if err := json.Unmarshal(value, &c); err != nil {
		return fmt.Errorf("%w: %v", errBadFact, err)
	}
	id, err := channelID(ctx, tx, ch, c.Name)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO remote_channels(ch, owner, start_off, next_off, pruned_below, tail_off, tail) VALUES(?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT(ch) DO UPDATE SET owner = excluded.owner, start_off = excluded.start_off, next_off = excluded.next_off,
			pruned_below = excluded.pruned_below, tail_off = excluded.tail_off, tail = excluded.tail`,
		id, owner, c.Start, c.Next, c.Pruned, c.TailOff, c.Tail)
	return err
}

func applyRunFact(ctx context.Context, tx *sql.Tx, ch headers.Channel, sub string, value []byte) error {
	bucket, err := strconv.ParseInt(sub, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: bucket %q", errBadFact, sub)
	}
	id, err := channelID(ctx, tx, ch, "")
	if err != nil {
		return err
	}
	if value == nil {
		_, err = tx.ExecContext(ctx, `DELETE FROM remote_stats WHERE ch = ? AND bucket = ?`, id, bucket)
		return err
	}
	var r runFact
	if err := json.Unmarshal(value, &r); err != nil {
		return fmt.Errorf("%w: %v", errBadFact, err)
	}
	_, err = tx.ExecContext(ctx, `INSERT OR REPLACE INTO remote_stats(ch, bucket, n_data, n_marker, n_stamped, n_undecodable,
		sum_entries, max_entries, sum_bytes, min_ts, first_stamped, first_unstamped, last_stamped) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		id, bucket, r.Data, r.Marker, r.Stamped, r.Undecodable, r.Entries, r.MaxEntries, r.Bytes, r.MinTS, r.FirstStamped, r.FirstUnstamped, r.LastStamped)
	return err
}

func applyHolesFact(ctx context.Context, tx *sql.Tx, ch headers.Channel, sub string, value []byte) error {
	chunk, err := strconv.ParseInt(sub, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: chunk %q", errBadFact, sub)
	}
	id, err := channelID(ctx, tx, ch, "")
	if err != nil {
		return err
	}
	lo, hi := chunk<<holeChunkBits, (chunk+1)<<holeChunkBits
	if _, err := tx.ExecContext(ctx, `DELETE FROM remote_holes WHERE ch = ? AND from_off >= ? AND from_off < ?`, id, lo, hi); err != nil {
		return err
	}
	if value == nil {
		return nil
	}
	var h holesFact
	if err := json.Unmarshal(value, &h); err != nil {
		return fmt.Errorf("%w: %v", errBadFact, err)
	}
	for _, x := range h.Holes {
		if _, err := tx.ExecContext(ctx, `INSERT OR REPLACE INTO remote_holes(ch, from_off, to_off, kind) VALUES(?, ?, ?, ?)`, id, x[0], x[1], x[2]); err != nil {
			return err
		}
	}
	return nil
}

// applyFindingFact stores a finding as its recorder published it, with its
// history, unless it is anchored at a channel assigned here.
func applyFindingFact(ctx context.Context, tx *sql.Tx, key string, value []byte) error {
	if value == nil {
		var anchor string
		if err := tx.QueryRowContext(ctx, `SELECT anchor FROM findings WHERE key = ?`, key).Scan(&anchor); err != nil {
			return nil // not stored: nothing to delete
		}
		if ch, err := parseChannel(anchor); err == nil && assignedHere(ctx, tx, ch) {
			return nil
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM finding_events WHERE finding = (SELECT id FROM findings WHERE key = ?)`, key); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `DELETE FROM findings WHERE key = ?`, key)
		return err
	}
	var v findingFact
	if err := json.Unmarshal(value, &v); err != nil {
		return fmt.Errorf("%w: %v", errBadFact, err)
	}
	if ch, err := parseChannel(v.Anchor); err == nil && assignedHere(ctx, tx, ch) {
		return nil
	}
	id := findingIDOf(key)
	if _, err := tx.ExecContext(ctx, `INSERT INTO findings(id, key, derived, code, severity, topic, coords, summary, count, safe_join, first_seen, last_seen,
			resolved_at, resolved_why, ack_at, ack_by, ack_reason, anchor, epoch, hw)
		VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT(key) DO UPDATE SET derived = excluded.derived, code = excluded.code, severity = excluded.severity, topic = excluded.topic,
			coords = excluded.coords, summary = excluded.summary, count = excluded.count, safe_join = excluded.safe_join,
			first_seen = excluded.first_seen, last_seen = excluded.last_seen, resolved_at = excluded.resolved_at, resolved_why = excluded.resolved_why,
			ack_at = excluded.ack_at, ack_by = excluded.ack_by, ack_reason = excluded.ack_reason, anchor = excluded.anchor, epoch = excluded.epoch, hw = excluded.hw`,
		id, key, v.Derived, string(v.Code), int(v.Severity), v.Topic, v.Coords, v.Summary, v.Count, v.SafeJoin, v.First, v.Last,
		v.ResolvedAt, v.ResolvedWhy, v.AckAt, v.AckBy, v.AckReason, v.Anchor, v.Epoch, v.HW); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM finding_events WHERE finding = (SELECT id FROM findings WHERE key = ?)`, key); err != nil {
		return err
	}
	for _, e := range v.History {
		if _, err := tx.ExecContext(ctx, `INSERT INTO finding_events(finding, at, what, who, why) SELECT id, ?, ?, ?, ? FROM findings WHERE key = ?`,
			e.At, e.What, e.Who, e.Why, key); err != nil {
			return err
		}
	}
	return nil
}

// applyAckFact acknowledges a finding for the epoch (opening) the ack was
// taken in: one reopened since is a new occurrence the ack does not cover.
func applyAckFact(ctx context.Context, tx *sql.Tx, key string, value []byte) error {
	if value == nil {
		return nil
	}
	var a ackFact
	if err := json.Unmarshal(value, &a); err != nil {
		return fmt.Errorf("%w: %v", errBadFact, err)
	}
	res, err := tx.ExecContext(ctx, `UPDATE findings SET ack_at = ?, ack_by = ?, ack_reason = ? WHERE key = ? AND epoch = ? AND resolved_at IS NULL
		AND (ack_at IS NULL OR ack_at != ? OR ack_by != ?)`, a.At, a.By, a.Reason, key, a.Epoch, a.At, a.By)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n > 0 {
		_, err = tx.ExecContext(ctx, `INSERT INTO finding_events(finding, at, what, who, why) SELECT id, ?, 'acknowledged', ?, ? FROM findings WHERE key = ?`,
			a.At, a.By, a.Reason, key)
	}
	return err
}

// The publishing side: what a shard's store says about the channels
// assigned to it.

// channelFactOf describes an assigned channel: its name, consumed range
// and newest stamped data record.
func (s *Store) channelFactOf(ctx context.Context, ch headers.Channel) ([]byte, error) {
	var c channelFact
	var id int64
	if err := s.db.QueryRowContext(ctx, `SELECT id, name, start_off, next_off, pruned_below FROM channels WHERE topic = ? AND part = ?`,
		ch.Topic[:], ch.Partition).Scan(&id, &c.Name, &c.Start, &c.Next, &c.Pruned); err != nil {
		return nil, fmt.Errorf("observer: describe channel %s: %w", ch, err)
	}
	c.TailOff = -1
	err := s.db.QueryRowContext(ctx, `SELECT off, stamp FROM records WHERE ch = ? AND kind = `+sqlKindData+` AND stamped ORDER BY off DESC LIMIT 1`, id).
		Scan(&c.TailOff, &c.Tail)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("observer: describe channel %s: %w", ch, err)
	}
	return json.Marshal(c)
}

// runFactOf returns a statistics run of channel id, or nil when there is
// none (pruned).
func (s *Store) runFactOf(ctx context.Context, id, bucket int64) ([]byte, error) {
	var r runFact
	var fs, fu, ls sql.NullInt64
	err := s.db.QueryRowContext(ctx, `SELECT n_data, n_marker, n_stamped, n_undecodable, sum_entries, max_entries, sum_bytes, min_ts,
		first_stamped, first_unstamped, last_stamped FROM chan_stats WHERE ch = ? AND bucket = ?`, id, bucket).
		Scan(&r.Data, &r.Marker, &r.Stamped, &r.Undecodable, &r.Entries, &r.MaxEntries, &r.Bytes, &r.MinTS, &fs, &fu, &ls)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("observer: statistics of run %d: %w", bucket, err)
	}
	ptr := func(v sql.NullInt64) *int64 {
		if !v.Valid {
			return nil
		}
		return &v.Int64
	}
	r.FirstStamped, r.FirstUnstamped, r.LastStamped = ptr(fs), ptr(fu), ptr(ls)
	return json.Marshal(r)
}

// holesFactOf returns the holes of channel id in a chunk of offsets: its
// markers, aborted records and skipped ranges (by where they start), or
// nil when there are none.
func (s *Store) holesFactOf(ctx context.Context, id, chunk int64) ([]byte, error) {
	lo, hi := chunk<<holeChunkBits, (chunk+1)<<holeChunkBits
	var h holesFact
	rows, err := s.db.QueryContext(ctx, `SELECT off, off + 1, kind FROM records WHERE ch = ? AND off >= ? AND off < ? AND kind IN `+sqlHoleKinds+`
		UNION ALL SELECT from_off, to_off, 0 FROM gaps WHERE ch = ? AND from_off >= ? AND from_off < ?
		ORDER BY 1`, id, lo, hi, id, lo, hi)
	if err != nil {
		return nil, fmt.Errorf("observer: holes of chunk %d: %w", chunk, err)
	}
	defer rows.Close()
	for rows.Next() {
		var x [3]int64
		if err := rows.Scan(&x[0], &x[1], &x[2]); err != nil {
			return nil, fmt.Errorf("observer: holes of chunk %d: %w", chunk, err)
		}
		h.Holes = append(h.Holes, x)
	}
	if err := rows.Err(); err != nil || len(h.Holes) == 0 {
		return nil, err
	}
	return json.Marshal(h)
}

// fineFactOf returns the one-record parts of channel id when it holds
// fewer than growthFineBelow statistics runs, else nil.
func (s *Store) fineFactOf(ctx context.Context, id int64) ([]byte, error) {
	var runs int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM chan_stats WHERE ch = ? AND n_stamped > 0`, id).Scan(&runs); err != nil {
		return nil, fmt.Errorf("observer: record parts: %w", err)
	}
	if runs == 0 || runs >= growthFineBelow {
		return nil, nil
	}
	rows, err := s.db.QueryContext(ctx, `SELECT off, n_off + n_seq, hdr_bytes, ts FROM records
		WHERE ch = ? AND kind = `+sqlKindData+` AND stamped AND err IS NULL ORDER BY off`, id)
	if err != nil {
		return nil, fmt.Errorf("observer: record parts: %w", err)
	}
	defer rows.Close()
	var b []byte
	for rows.Next() {
		var off, e, n, ts int64
		if err := rows.Scan(&off, &e, &n, &ts); err != nil {
			return nil, fmt.Errorf("observer: record parts: %w", err)
		}
		b = appendFinePart(b, off, e, n, ts)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("observer: record parts: %w", err)
	}
	return json.Marshal(fineFact{Parts: b})
}

// ownFacts returns the values of the findings anchored at, and the
// partials of, the channels owned here, by fact key.
func (s *Store) ownFacts(ctx context.Context) (map[string][]byte, error) {
	out := map[string][]byte{}
	rows, err := s.db.QueryContext(ctx, `SELECT f.id, f.key, f.derived, f.code, f.severity, f.topic, f.coords, f.summary, f.count, f.safe_join,
			f.first_seen, f.last_seen, f.resolved_at, f.resolved_why, f.ack_at, f.ack_by, f.ack_reason, f.anchor, f.epoch, f.hw
		FROM findings f JOIN channels c ON c.owned AND f.anchor = `+channelText+``)
	if err != nil {
		return nil, fmt.Errorf("observer: findings to publish: %w", err)
	}
	type row struct {
		id  int64
		key string
		v   findingFact
	}
	var fs []row
	for rows.Next() {
		var r row
		var resolvedAt, ackAt sql.NullInt64
		if err := rows.Scan(&r.id, &r.key, &r.v.Derived, &r.v.Code, &r.v.Severity, &r.v.Topic, &r.v.Coords, &r.v.Summary, &r.v.Count, &r.v.SafeJoin,
			&r.v.First, &r.v.Last, &resolvedAt, &r.v.ResolvedWhy, &ackAt, &r.v.AckBy, &r.v.AckReason, &r.v.Anchor, &r.v.Epoch, &r.v.HW); err != nil {
			rows.Close()
			return nil, fmt.Errorf("observer: findings to publish: %w", err)
		}
		if resolvedAt.Valid {
			r.v.ResolvedAt = &resolvedAt.Int64
		}
		if ackAt.Valid {
			r.v.AckAt = &ackAt.Int64
		}
		fs = append(fs, r)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("observer: findings to publish: %w", err)
	}
	for _, r := range fs {
		ev, err := s.db.QueryContext(ctx, `SELECT at, what, who, why FROM finding_events WHERE finding = ? ORDER BY id`, r.id)
		if err != nil {
			return nil, fmt.Errorf("observer: findings to publish: %w", err)
		}
		for ev.Next() {
			var e findingEventDB
			if err := ev.Scan(&e.At, &e.What, &e.Who, &e.Why); err != nil {
				ev.Close()
				return nil, fmt.Errorf("observer: findings to publish: %w", err)
			}
			r.v.History = append(r.v.History, e)
		}
		ev.Close()
		b, err := json.Marshal(r.v)
		if err != nil {
			return nil, err
		}
		out[factFinding+r.key] = b
	}
	prows, err := s.db.QueryContext(ctx, `SELECT `+channelText+`, p.key, p.code, p.n, p.hw, p.first_off, p.claimed, p.why, p.bridged
		FROM partials p JOIN channels c ON c.id = p.src WHERE c.owned`)
	if err != nil {
		return nil, fmt.Errorf("observer: contributions to publish: %w", err)
	}
	defer prows.Close()
	for prows.Next() {
		var src, key string
		var p partialFact
		if err := prows.Scan(&src, &key, &p.Code, &p.N, &p.HW, &p.First, &p.Claimed, &p.Why, &p.Bridged); err != nil {
			return nil, fmt.Errorf("observer: contributions to publish: %w", err)
		}
		b, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		out[factPartial+src+"|"+key] = b
	}
	return out, prows.Err()
}

// publishedFacts returns the facts self published that are still in the
// state topic, with their values, whose keys start with one of prefixes.
func (s *Store) publishedFacts(ctx context.Context, self string, prefixes ...string) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, p := range prefixes {
		rows, err := s.db.QueryContext(ctx, `SELECT key, value FROM facts WHERE owner = ? AND key >= ? AND key < ?`, self, p, p[:len(p)-1]+"}")
		if err != nil {
			return nil, fmt.Errorf("observer: published state: %w", err)
		}
		for rows.Next() {
			var k string
			var v []byte
			if err := rows.Scan(&k, &v); err != nil {
				rows.Close()
				return nil, fmt.Errorf("observer: published state: %w", err)
			}
			out[k] = v
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, fmt.Errorf("observer: published state: %w", err)
		}
	}
	return out, nil
}

// channelText is a channels row c's text as headers.Channel.String writes
// it: the topic ID in UUID form, "/", the partition.
const channelText = `(lower(substr(hex(c.topic), 1, 8) || '-' || substr(hex(c.topic), 9, 4) || '-' || substr(hex(c.topic), 13, 4) || '-' ||
	substr(hex(c.topic), 17, 4) || '-' || substr(hex(c.topic), 21, 12)) || '/' || c.part)`

// members returns the group's members as published: instance → URL.
func (s *Store) members(ctx context.Context) (map[string]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT instance, url FROM members`)
	if err != nil {
		return nil, fmt.Errorf("observer: members: %w", err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var i, u string
		if err := rows.Scan(&i, &u); err != nil {
			return nil, fmt.Errorf("observer: members: %w", err)
		}
		out[i] = u
	}
	return out, rows.Err()
}

// ownerOf returns the shard that published ch's channel fact last, or "".
func (s *Store) ownerOf(ctx context.Context, ch headers.Channel) string {
	var owner string
	s.db.QueryRowContext(ctx, `SELECT rc.owner FROM remote_channels rc JOIN channels c ON c.id = rc.ch WHERE c.topic = ? AND c.part = ?`,
		ch.Topic[:], ch.Partition).Scan(&owner)
	return owner
}

// nowMilli is the time facts carry.
func nowMilli() int64 { return time.Now().UnixMilli() }

// remirror applies again the facts of the state topic about chs, which
// were just let go: while a channel was assigned here its facts were this
// shard's own and updated nothing else; now they are what it knows of the
// channel until the new owner publishes. Without them, an evaluation in
// between would judge the claims on the channel as if it had no holes,
// and the new owner would resolve what still holds.
func (s *Store) remirror(ctx context.Context, chs []headers.Channel) error {
	var fs []fact
	for _, ch := range chs {
		for _, kind := range []string{factChannel, factRun, factHoles, factFine, factPartial} {
			prefix := kind + ch.String()
			rows, err := s.db.QueryContext(ctx, `SELECT key, owner, value FROM facts WHERE key = ? OR (key > ? AND key < ?)`,
				prefix, prefix+"|", prefix+"}")
			if err != nil {
				return fmt.Errorf("observer: remirror %s: %w", ch, err)
			}
			for rows.Next() {
				var f fact
				if err := rows.Scan(&f.key, &f.owner, &f.value); err != nil {
					rows.Close()
					return fmt.Errorf("observer: remirror %s: %w", ch, err)
				}
				fs = append(fs, f)
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("observer: remirror %s: %w", ch, err)
			}
		}
	}
	return s.applyFacts(ctx, fs)
}

// int64s returns the one integer column q selects.
func (s *Store) int64s(ctx context.Context, q string, args ...any) ([]int64, error) {
	rows, err := s.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("observer: %w", err)
	}
	defer rows.Close()
	var out []int64
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("observer: %w", err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
