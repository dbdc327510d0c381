package observer

// The finding lifecycle.
//
// Every finding is a row of the findings table, keyed by what it is about
// (Finding.Key), from the first evaluation that finds it. It is open until
// either its condition no longer holds — it is resolved — or an operator
// acknowledges it. Alerts and the metrics count open findings only.
//
// How a finding resolves depends on where it comes from:
//
//   - Findings evaluated from the store and the brokers' offsets
//     (unsettleable-claim, partially-stamped-topic, late-joiner-window,
//     stamp-growth) are judged again at every evaluation against the
//     cluster; one the evaluation no longer finds is resolved, and one
//     that comes back after that is reopened, unacknowledged: a new
//     occurrence.
//   - Findings detected at ingest from one record and its sender's
//     previous one (sequence-gap, stamp-regression, undecodable-stamp,
//     cross-partition-cause) describe records in the log; they resolve
//     when the log no longer holds any record they name (retention or
//     deletion moved the log start past them, or the topic was deleted).
//     A later record that repeats one adds to its count; one resolved and
//     seen again is reopened.
//
// Resolution needs the brokers' offsets: with the cluster out of reach
// nothing is resolved, and a finding naming a record of a channel whose
// offsets the brokers did not list (ChannelOffsets.Unknown) is not judged. Resolved findings are deleted after the closed
// retention (Config.ClosedRetention); acknowledged ones are kept while
// their condition holds, since forgetting one would raise it again.

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/parsley-go/parsley/headers"
)

// State is where a finding is in its lifecycle.
type State string

// The states.
const (
	// StateOpen: the condition holds and nobody acknowledged it. Alerts
	// count these.
	StateOpen State = "open"
	// StateAcknowledged: the condition holds, and an operator said they
	// know (Finding.Ack says who and why).
	StateAcknowledged State = "acknowledged"
	// StateResolved: the condition no longer holds (Finding.Resolved says
	// when and why).
	StateResolved State = "resolved"
)

// ParseState parses a state name; "" and "all" return "" (every state).
func ParseState(s string) (State, error) {
	switch st := State(strings.ToLower(s)); st {
	case StateOpen, StateAcknowledged, StateResolved:
		return st, nil
	case "", "all":
		return "", nil
	}
	return "", fmt.Errorf("observer: finding state %q (want open, acknowledged, resolved or all): %w", s, ErrBadState)
}

// ErrBadState is wrapped when a finding state name is unknown.
var ErrBadState = errors.New("unknown finding state")

// Ack is an operator's acknowledgement of a finding.
type Ack struct {
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	At     time.Time `json:"at"`
}

// Resolution says when and why a finding's condition stopped holding.
type Resolution struct {
	At  time.Time `json:"at"`
	Why string    `json:"why"`
}

// Event is one entry of a finding's history.
type Event struct {
	At   time.Time `json:"at"`
	What string    `json:"what"` // "acknowledged", "resolved" or "reopened"
	By   string    `json:"by,omitempty"`
	Why  string    `json:"why,omitempty"`
}

// ErrBadAck is wrapped when an acknowledgement lacks who or why.
var ErrBadAck = errors.New("invalid acknowledgement")

// maxAckReason bounds the reason an acknowledgement keeps.
const maxAckReason = 1000

// derivedCodes are the codes of the evaluated rules: judged anew at every
// evaluation, resolved when it no longer finds them.
var derivedCodes = map[Code]bool{
	CodeUnsettleableClaim: true, CodePartiallyStamped: true, CodeLateJoinerWindow: true, CodeStampGrowth: true,
}

// ResolvesBy says how findings of code c resolve by themselves.
func (c Code) ResolvesBy() string {
	if derivedCodes[c] {
		return "resolves when an evaluation against the cluster no longer finds it"
	}
	return "resolves when the log no longer holds any record it names (log start past them, or topic deleted)"
}

// lifecycleColumns are what schema 3 added to the findings table.
var lifecycleColumns = []struct{ name, decl string }{
	{"derived", "INTEGER NOT NULL DEFAULT 0"}, // 1: an evaluated rule's finding
	{"first_seen", "INTEGER NOT NULL DEFAULT 0"},
	{"last_seen", "INTEGER NOT NULL DEFAULT 0"},
	{"safe_join", "TEXT NOT NULL DEFAULT ''"}, // JSON
	{"resolved_at", "INTEGER"},                // NULL while the condition holds
	{"resolved_why", "TEXT NOT NULL DEFAULT ''"},
	{"ack_at", "INTEGER"}, // NULL: not acknowledged
	{"ack_by", "TEXT NOT NULL DEFAULT ''"},
	{"ack_reason", "TEXT NOT NULL DEFAULT ''"},
}

const lifecycleTables = `
CREATE TABLE IF NOT EXISTS finding_events(
	id INTEGER PRIMARY KEY,
	finding INTEGER NOT NULL,
	at INTEGER NOT NULL,
	what TEXT NOT NULL,
	who TEXT NOT NULL DEFAULT '',
	why TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS finding_events_of ON finding_events(finding, id);
-- Sender IDs a stage would derive from names the observer discovered
-- (changelog topics <app>-<stage>-changelog): see senders.go.
CREATE TABLE IF NOT EXISTS sender_names(
	sender BLOB PRIMARY KEY,
	app TEXT NOT NULL,
	stage TEXT NOT NULL,
	part INTEGER NOT NULL) WITHOUT ROWID;
`

// migrate3 brings a schema 2 store to schema 3 in one transaction: the
// findings gain their lifecycle columns (every finding kept, open, first
// seen at the migration), the history and sender-name tables are created.
func (s *Store) migrate3(ctx context.Context, tx *sql.Tx) error {
	for _, c := range lifecycleColumns {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('findings') WHERE name = ?`, c.name).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			if _, err := tx.ExecContext(ctx, `ALTER TABLE findings ADD COLUMN `+c.name+` `+c.decl); err != nil {
				return err
			}
		}
	}
	if _, err := tx.ExecContext(ctx, lifecycleTables); err != nil {
		return err
	}
	now := time.Now().UnixMilli()
	_, err := tx.ExecContext(ctx, `UPDATE findings SET first_seen = ?, last_seen = ? WHERE first_seen = 0`, now, now)
	return err
}

// findingCols are the columns readFindings scans.
const findingCols = `id, key, derived, code, severity, topic, coords, summary, count, safe_join, first_seen, last_seen,
	resolved_at, resolved_why, ack_at, ack_by, ack_reason, anchor`

func scanFinding(sc scanner) (Finding, bool, error) {
	var f Finding
	var coords, safeJoin string
	var derived bool
	var resolvedAt, ackAt sql.NullInt64
	var resolvedWhy, ackBy, ackReason string
	var first, last int64
	if err := sc.Scan(&f.ID, &f.Key, &derived, &f.Code, &f.Severity, &f.Topic, &coords, &f.Summary, &f.Count, &safeJoin, &first, &last,
		&resolvedAt, &resolvedWhy, &ackAt, &ackBy, &ackReason, &f.anchor); err != nil {
		return f, false, err
	}
	f.Coordinates = strings.Fields(coords)
	if safeJoin != "" {
		if err := json.Unmarshal([]byte(safeJoin), &f.SafeJoin); err != nil {
			return f, false, fmt.Errorf("finding %d: safe join offsets: %w", f.ID, err)
		}
	}
	f.FirstSeen, f.LastSeen = time.UnixMilli(first).UTC(), time.UnixMilli(last).UTC()
	f.State = StateOpen
	if ackAt.Valid {
		f.Ack = &Ack{By: ackBy, Reason: ackReason, At: time.UnixMilli(ackAt.Int64).UTC()}
		f.State = StateAcknowledged
	}
	if resolvedAt.Valid {
		f.Resolved = &Resolution{At: time.UnixMilli(resolvedAt.Int64).UTC(), Why: resolvedWhy}
		f.State = StateResolved
	}
	f.Action = f.Code.Action()
	if f.Severity == SeverityInfo && f.Code == CodeUnsettleableClaim {
		f.Action = bridgedAction
	}
	return f, derived, nil
}

// readFindings returns every stored finding, keyed by Key.
func (s *Store) readFindings(ctx context.Context, q querier) (map[string]Finding, map[string]bool, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+findingCols+` FROM findings ORDER BY id`)
	if err != nil {
		return nil, nil, fmt.Errorf("observer: read findings: %w", err)
	}
	defer rows.Close()
	out, derived := map[string]Finding{}, map[string]bool{}
	for rows.Next() {
		f, d, err := scanFinding(rows)
		if err != nil {
			return nil, nil, fmt.Errorf("observer: read findings: %w", err)
		}
		out[f.Key], derived[f.Key] = f, d
	}
	return out, derived, rows.Err()
}

// execer is a database or a transaction, to write through.
type execer interface {
	ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error)
}

// reconcile records an evaluation against the cluster: derived are what
// the evaluated rules found now, counted the findings added up from
// partials counted at ingest (cross-partition-cause), offs the brokers'
// offsets. New findings are inserted open; stored derived findings not
// found now are resolved, and resolved ones found again reopened; a
// counted finding whose count grew is seen again (reopened if it had
// resolved); ingest findings whose records the log no longer holds are
// resolved; resolved findings older than retention (0: kept) are deleted
// with their history. Only findings anchored at channels this observer
// owns are judged: the others are their owners' (partials.go).
// When judge is false (the brokers' offsets are not known) only new
// findings are recorded.
func (s *Store) reconcile(ctx context.Context, derived, counted []Finding, offs map[headers.Channel]ChannelOffsets, judge bool, now time.Time, retention time.Duration, own *ownership) error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("observer: record findings: %w", err)
	}
	defer tx.Rollback()
	// Take the write lock before reading: a transaction that reads and
	// then writes after the ingest committed would fail at once under
	// WAL (a stale snapshot), where one that writes first waits its turn.
	if _, err := tx.ExecContext(ctx, `UPDATE meta SET v = v WHERE k = 'schema'`); err != nil {
		return fmt.Errorf("observer: record findings: %w", err)
	}
	stored, isDerived, err := s.readFindings(ctx, tx)
	if err != nil {
		return err
	}
	ms := now.UnixMilli()
	seen := map[string]bool{}
	for i, f := range append(derived, counted...) {
		isDerived := i < len(derived)
		seen[f.Key] = true
		var safe []byte
		if len(f.SafeJoin) > 0 {
			safe, _ = json.Marshal(f.SafeJoin)
		}
		old, ok := stored[f.Key]
		switch {
		case !ok:
			_, err = tx.ExecContext(ctx, `INSERT INTO findings(id, key, derived, code, severity, topic, coords, summary, count, safe_join, first_seen, last_seen, anchor, epoch)
				VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)`,
				s.newFindingID(f.Key), f.Key, isDerived, string(f.Code), int(f.Severity), f.Topic, strings.Join(f.Coordinates, " "), f.Summary, f.Count, string(safe), ms, ms, f.anchor)
		case !isDerived && f.Count <= old.Count:
			// Counted at ingest: nothing new was seen.
			continue
		case old.State == StateResolved:
			// Back after it stopped holding, or seen again: a new
			// occurrence, which the earlier acknowledgement does not cover.
			_, err = tx.ExecContext(ctx, `UPDATE findings SET severity = ?, topic = ?, coords = ?, summary = ?, count = ?, safe_join = ?, last_seen = ?, anchor = ?, epoch = epoch + 1,
				resolved_at = NULL, resolved_why = '', ack_at = NULL, ack_by = '', ack_reason = '' WHERE id = ?`,
				int(f.Severity), f.Topic, strings.Join(f.Coordinates, " "), f.Summary, f.Count, string(safe), ms, f.anchor, old.ID)
			if err == nil {
				why := "the condition holds again"
				if !isDerived {
					why = "seen again: " + f.Coordinates[0]
				}
				err = addEvent(ctx, tx, old.ID, ms, "reopened", "", why)
			}
		default:
			_, err = tx.ExecContext(ctx, `UPDATE findings SET severity = ?, topic = ?, coords = ?, summary = ?, count = ?, safe_join = ?, last_seen = ?, anchor = ? WHERE id = ?`,
				int(f.Severity), f.Topic, strings.Join(f.Coordinates, " "), f.Summary, f.Count, string(safe), ms, f.anchor, old.ID)
		}
		if err != nil {
			return fmt.Errorf("observer: record finding %s: %w", f.Key, err)
		}
	}
	if !judge {
		return commit(tx)
	}
	topics := map[headers.TopicID]bool{}
	for ch := range offs {
		topics[ch.Topic] = true
	}
	for key, f := range stored {
		if f.State == StateResolved || seen[key] || !own.anchoredHere(f.anchor) {
			continue
		}
		if namesUnknown(f.Coordinates, offs) {
			continue // judged once the brokers list those offsets again
		}
		var why string
		if isDerived[key] {
			why = "an evaluation against the cluster no longer finds it"
		} else if w, gone := goneFromLog(f.Coordinates, offs, topics); gone {
			why = w
		} else {
			continue
		}
		if _, err := tx.ExecContext(ctx, `UPDATE findings SET resolved_at = ?, resolved_why = ? WHERE id = ?`, ms, why, f.ID); err != nil {
			return fmt.Errorf("observer: resolve finding %s: %w", key, err)
		}
		if err := addEvent(ctx, tx, f.ID, ms, "resolved", "", why); err != nil {
			return err
		}
	}
	if retention > 0 {
		cut := now.Add(-retention).UnixMilli()
		if _, err := tx.ExecContext(ctx, `DELETE FROM finding_events WHERE finding IN (SELECT id FROM findings WHERE resolved_at < ?)`, cut); err != nil {
			return fmt.Errorf("observer: drop closed findings: %w", err)
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM findings WHERE resolved_at < ?`, cut); err != nil {
			return fmt.Errorf("observer: drop closed findings: %w", err)
		}
	}
	return commit(tx)
}

func commit(tx *sql.Tx) error {
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("observer: record findings: %w", err)
	}
	return nil
}

// namesUnknown reports whether coords name a record of a channel whose
// offsets the brokers did not list now.
func namesUnknown(coords []string, offs map[headers.Channel]ChannelOffsets) bool {
	for _, c := range coords {
		if ref, err := ParseRef(c); err == nil && ref.ByID && offs[headers.Channel{Topic: ref.ID, Partition: ref.Partition}].Unknown {
			return true
		}
	}
	return false
}

// unknownChannels returns the channels of offs whose offsets are unknown.
func unknownChannels(offs map[headers.Channel]ChannelOffsets) []headers.Channel {
	var out []headers.Channel
	for ch, co := range offs {
		if co.Unknown {
			out = append(out, ch)
		}
	}
	return out
}

// goneFromLog reports whether the log holds none of the records coords
// names: each one's topic is deleted, or its partition's log start is past
// it. A sequence claim, or a channel whose offsets are not known, keeps
// the finding open.
func goneFromLog(coords []string, offs map[headers.Channel]ChannelOffsets, topics map[headers.TopicID]bool) (string, bool) {
	if len(coords) == 0 || len(offs) == 0 {
		return "", false
	}
	deleted := 0
	for _, c := range coords {
		ref, err := ParseRef(c)
		if err != nil || !ref.ByID {
			return "", false
		}
		if !topics[ref.ID] {
			deleted++
			continue
		}
		co, ok := offs[headers.Channel{Topic: ref.ID, Partition: ref.Partition}]
		if !ok || co.Start <= ref.Offset {
			return "", false
		}
	}
	if deleted == len(coords) {
		return "the topics of the records it names were deleted", true
	}
	return "the log no longer holds the records it names (log start past them, or topic deleted)", true
}

func addEvent(ctx context.Context, q execer, finding, at int64, what, who, why string) error {
	if _, err := q.ExecContext(ctx, `INSERT INTO finding_events(finding, at, what, who, why) VALUES(?, ?, ?, ?, ?)`, finding, at, what, who, why); err != nil {
		return fmt.Errorf("observer: finding %d history: %w", finding, err)
	}
	return nil
}

// Acknowledge records that by knows about finding id, and why: the finding
// stops counting towards alerts and the metrics while its condition holds.
// An empty by or reason, or a reason over 1000 characters, is an error
// wrapping ErrBadAck; an unknown id one wrapping ErrNotFound. It returns
// the finding as it is now.
func (s *Store) Acknowledge(ctx context.Context, id int64, by, reason string) (Finding, error) {
	by, reason = strings.TrimSpace(by), strings.TrimSpace(reason)
	switch {
	case by == "":
		return Finding{}, fmt.Errorf("observer: acknowledge finding %d: no identity: %w", id, ErrBadAck)
	case reason == "":
		return Finding{}, fmt.Errorf("observer: acknowledge finding %d: say why (a reason is kept in its history): %w", id, ErrBadAck)
	case utf8.RuneCountInString(reason) > maxAckReason:
		return Finding{}, fmt.Errorf("observer: acknowledge finding %d: reason has %d characters, at most %d: %w", id, utf8.RuneCountInString(reason), maxAckReason, ErrBadAck)
	}
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return Finding{}, fmt.Errorf("observer: acknowledge finding %d: %w", id, err)
	}
	defer tx.Rollback()
	ms := time.Now().UnixMilli()
	res, err := tx.ExecContext(ctx, `UPDATE findings SET ack_at = ?, ack_by = ?, ack_reason = ? WHERE id = ?`, ms, by, reason, id)
	if err != nil {
		return Finding{}, fmt.Errorf("observer: acknowledge finding %d: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return Finding{}, fmt.Errorf("observer: finding %d: %w", id, ErrNotFound)
	}
	if err := addEvent(ctx, tx, id, ms, "acknowledged", by, reason); err != nil {
		return Finding{}, err
	}
	if err := tx.Commit(); err != nil {
		return Finding{}, fmt.Errorf("observer: acknowledge finding %d: %w", id, err)
	}
	return s.Finding(ctx, id)
}

// Finding returns the stored finding id, by name, or an error wrapping
// ErrNotFound.
func (s *Store) Finding(ctx context.Context, id int64) (Finding, error) {
	f, _, err := scanFinding(s.db.QueryRowContext(ctx, `SELECT `+findingCols+` FROM findings WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Finding{}, fmt.Errorf("observer: finding %d: %w", id, ErrNotFound)
	}
	if err != nil {
		return Finding{}, fmt.Errorf("observer: read finding %d: %w", id, err)
	}
	names, err := s.Names(ctx)
	if err != nil {
		return Finding{}, err
	}
	return names.Named(f), nil
}

// History returns what happened to finding id, oldest first: when it was
// acknowledged (by whom, why), resolved and reopened.
func (s *Store) History(ctx context.Context, id int64) ([]Event, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT at, what, who, why FROM finding_events WHERE finding = ? ORDER BY id`, id)
	if err != nil {
		return nil, fmt.Errorf("observer: history of finding %d: %w", id, err)
	}
	defer rows.Close()
	out := []Event{}
	for rows.Next() {
		var e Event
		var at int64
		if err := rows.Scan(&at, &e.What, &e.By, &e.Why); err != nil {
			return nil, fmt.Errorf("observer: history of finding %d: %w", id, err)
		}
		e.At = time.UnixMilli(at).UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}
