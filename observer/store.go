package observer

import (
	"context"
	"database/sql"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/parsley-go/parsley/headers"
	_ "modernc.org/sqlite" // the "sqlite" database/sql driver, pure Go
)

// schemaVersion is bumped on every incompatible schema change; a store
// written by another version is refused rather than misread.
const schemaVersion = "4"

// ErrSchemaVersion is wrapped when a store was written by an incompatible
// version of the observer, or by an older one and opened read-only (a
// writable open migrates it).
var ErrSchemaVersion = errors.New("unsupported store schema version")

// recordKind says what a stored record is; it is the records.kind column.
type recordKind int

const (
	kindData    recordKind = 0
	kindControl recordKind = 1 // a transaction marker
	kindAborted recordKind = 2 // a record of an aborted transaction (seen only when reading uncommitted)
	kindPending recordKind = 3 // a transactional record whose marker has not been seen yet
)

// The kinds as SQL literals, for the queries and the partial index that
// must name a kind in their text (a bound parameter cannot select a
// partial index). TestKindSQLSpellings keeps them equal to the kinds.
const (
	sqlKindData    = "0"
	sqlKindControl = "1"
	sqlKindAborted = "2"
	sqlKindPending = "3"
	// sqlHoleKinds are the positions a claim must not name: markers and
	// aborted records.
	sqlHoleKinds = "(" + sqlKindControl + ", " + sqlKindAborted + ")"
)

const schema = `
CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS channels(
	id INTEGER PRIMARY KEY,
	topic BLOB NOT NULL,
	part INTEGER NOT NULL,
	name TEXT NOT NULL DEFAULT '',
	start_off INTEGER NOT NULL DEFAULT -1,  -- first position consumed from; -1: not consumed
	next_off INTEGER NOT NULL DEFAULT -1,   -- position: everything below was fetched or skipped
	pruned_below INTEGER NOT NULL DEFAULT 0,
	UNIQUE(topic, part));
CREATE TABLE IF NOT EXISTS senders(id INTEGER PRIMARY KEY, sender BLOB NOT NULL UNIQUE);
CREATE TABLE IF NOT EXISTS records(
	id INTEGER PRIMARY KEY,
	ch INTEGER NOT NULL,
	off INTEGER NOT NULL,
	ts INTEGER NOT NULL,
	kind INTEGER NOT NULL,
	pid INTEGER NOT NULL DEFAULT -1,          -- producer ID of a transactional record
	stamped INTEGER NOT NULL,
	tagged INTEGER NOT NULL,
	sender INTEGER NOT NULL,
	seq INTEGER NOT NULL,
	n_off INTEGER NOT NULL,
	n_seq INTEGER NOT NULL,
	hdr_bytes INTEGER NOT NULL,
	stamp BLOB,
	err TEXT,
	key_hash INTEGER);                        -- keyHash of the record's key; NULL without a key
CREATE UNIQUE INDEX IF NOT EXISTS records_at ON records(ch, off);
-- Markers and aborted records: the positions a claim must not name.
CREATE INDEX IF NOT EXISTS records_holes ON records(ch, off) WHERE kind IN ` + sqlHoleKinds + `;
-- Records of transactions whose marker was not seen when they were written:
-- the marker settles them through this index.
CREATE INDEX IF NOT EXISTS records_pending ON records(ch, pid) WHERE kind = ` + sqlKindPending + `;
-- Offsets a fetch skipped (aborted records under read_committed).
CREATE TABLE IF NOT EXISTS gaps(ch INTEGER NOT NULL, from_off INTEGER NOT NULL, to_off INTEGER NOT NULL,
	PRIMARY KEY(ch, from_off)) WITHOUT ROWID;
-- Offset claims in blocks: one row holds up to claimBlockPairs claims that
-- one channel's records made on channel ch, all within lo..hi (hi - lo at
-- most claimSpan), as (value, record) pairs; rec and last are its first
-- and last record. See claimblock.go.
CREATE TABLE IF NOT EXISTS claims(ch INTEGER NOT NULL, lo INTEGER NOT NULL, rec INTEGER NOT NULL,
	hi INTEGER NOT NULL, last INTEGER NOT NULL, pairs BLOB NOT NULL,
	PRIMARY KEY(ch, lo, rec)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS seq_claims(ch INTEGER NOT NULL, sender INTEGER NOT NULL, value INTEGER NOT NULL, rec INTEGER NOT NULL,
	PRIMARY KEY(ch, sender, value, rec)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sender_state(ch INTEGER NOT NULL, sender INTEGER NOT NULL, last_seq INTEGER NOT NULL, last_rec INTEGER NOT NULL,
	PRIMARY KEY(ch, sender)) WITHOUT ROWID;
-- Per channel and run of 64 offsets, what the records there looked like:
-- topic statistics and the stamp checks read these instead of every record.
CREATE TABLE IF NOT EXISTS chan_stats(
	ch INTEGER NOT NULL,
	bucket INTEGER NOT NULL,              -- offset >> 6
	n_data INTEGER NOT NULL,
	n_marker INTEGER NOT NULL,
	n_stamped INTEGER NOT NULL,           -- decodable stamped data records
	n_undecodable INTEGER NOT NULL,
	sum_entries INTEGER NOT NULL,
	max_entries INTEGER NOT NULL,
	sum_bytes INTEGER NOT NULL,
	min_ts INTEGER NOT NULL,
	first_stamped INTEGER,                -- offsets (record ids before schema 4)
	first_unstamped INTEGER,
	last_stamped INTEGER,
	PRIMARY KEY(ch, bucket)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS findings(
	id INTEGER PRIMARY KEY,
	key TEXT NOT NULL UNIQUE,
	code TEXT NOT NULL,
	severity INTEGER NOT NULL,
	topic TEXT NOT NULL,
	coords TEXT NOT NULL,
	summary TEXT NOT NULL,
	count INTEGER NOT NULL DEFAULT 1);
`

// Store is the observer's SQLite database: channels, records, claims,
// sender state and the findings detected at ingest. One Observer writes
// it; any number of readers may query it.
type Store struct {
	db       *sql.DB
	path     string
	readOnly bool
	// lifeMu serialises the writes of the finding lifecycle: evaluations
	// recording what they found, and acknowledgements.
	lifeMu sync.Mutex
	// sharded: the store is one shard's of a group (shard.go); set before
	// the observer runs.
	sharded bool
}

// OpenStore opens (creating if needed) the store at path. WAL mode with
// synchronous=NORMAL: the store is a cache of what the topics hold, so a
// lost tail is re-read from the brokers.
func OpenStore(ctx context.Context, path string) (*Store, error) {
	return openStore(ctx, path, url.Values{"_pragma": {"journal_mode(WAL)", "synchronous(NORMAL)", "busy_timeout(10000)", "cache_size(-32000)"}},
		(*Store).init)
}

// ErrNotStore is wrapped when a file opened read-only is not an observer
// store: not a SQLite database, or one without the observer's schema.
var ErrNotStore = errors.New("not an observer store")

// OpenStoreReadOnly opens an existing store for reading. It writes nothing
// to the file — no schema, no journal mode — and refuses a file that is not
// an observer store with an error wrapping ErrNotStore, or one written by
// another schema version with ErrSchemaVersion.
func OpenStoreReadOnly(ctx context.Context, path string) (*Store, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("observer: open store: %w", err)
	}
	return openStore(ctx, path, url.Values{"mode": {"ro"}, "_pragma": {"query_only(1)", "busy_timeout(10000)"}},
		func(s *Store, ctx context.Context) error { s.readOnly = true; return s.check(ctx) })
}

// openStore opens path with the URI parameters q and readies the store
// with ready (creating or checking its schema).
func openStore(ctx context.Context, path string, q url.Values, ready func(*Store, context.Context) error) (*Store, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("observer: open store %s: %w", path, err)
	}
	db.SetMaxOpenConns(8)
	s := &Store{db: db, path: path}
	if err := ready(s, ctx); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// check confirms, reading only, that the database is an observer store of
// this schema version.
func (s *Store) check(ctx context.Context) error {
	var n int
	err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('meta', 'channels', 'records', 'findings')`).Scan(&n)
	if err != nil {
		return fmt.Errorf("observer: %s is not a SQLite database (%v): %w", s.path, err, ErrNotStore)
	}
	if n < 4 {
		return fmt.Errorf("observer: %s is a SQLite database but not an observer store (it lacks the observer's tables; build one with `parsley-observe scan --db` or `serve --db`): %w", s.path, ErrNotStore)
	}
	var v string
	if err := s.db.QueryRowContext(ctx, `SELECT v FROM meta WHERE k = 'schema'`).Scan(&v); err != nil {
		return fmt.Errorf("observer: %s is not an observer store (no schema version: %v): %w", s.path, err, ErrNotStore)
	}
	if v == "2" || v == "3" {
		return fmt.Errorf("observer: store %s has schema version %s, this observer reads %q; open it once with `parsley-observe serve --db` or `scan --db`, which migrate it keeping every record and finding: %w", s.path, v, schemaVersion, ErrSchemaVersion)
	}
	if v != schemaVersion {
		return fmt.Errorf("observer: store %s has schema version %q, this observer reads %q: %w", s.path, v, schemaVersion, ErrSchemaVersion)
	}
	return nil
}

func (s *Store) init(ctx context.Context) error {
	if _, err := s.db.ExecContext(ctx, schema); err != nil {
		return fmt.Errorf("observer: create schema in %s: %w", s.path, err)
	}
	var v string
	err := s.db.QueryRowContext(ctx, `SELECT v FROM meta WHERE k='schema'`).Scan(&v)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		v = "2" // the tables just created are schema 2's; the migrations below finish them
		if _, err := s.db.ExecContext(ctx, `INSERT INTO meta(k, v) VALUES('schema', '2')`); err != nil {
			return fmt.Errorf("observer: write schema version in %s: %w", s.path, err)
		}
	case err != nil:
		return fmt.Errorf("observer: read schema version in %s: %w", s.path, err)
	case v != "2" && v != "3" && v != schemaVersion:
		return fmt.Errorf("observer: store %s has schema version %q, this observer reads %q: %w", s.path, v, schemaVersion, ErrSchemaVersion)
	}
	// key_hash came within schema 2: a store written before it gains the
	// column, NULL for the records already stored.
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('records') WHERE name = 'key_hash'`).Scan(&n); err != nil {
		return fmt.Errorf("observer: read the records columns in %s: %w", s.path, err)
	}
	if n == 0 {
		if _, err := s.db.ExecContext(ctx, `ALTER TABLE records ADD COLUMN key_hash INTEGER`); err != nil {
			return fmt.Errorf("observer: add key_hash to %s: %w", s.path, err)
		}
	}
	if v == "2" {
		if err := s.migrate(ctx, "3", s.migrate3); err != nil {
			return err
		}
		v = "3"
	}
	if v == "3" {
		if err := s.migrate(ctx, "4", s.migrate4); err != nil {
			return err
		}
	}
	return nil
}

// migrate runs step in a transaction that ends by setting the schema
// version to to: a migration is done whole or not at all.
func (s *Store) migrate(ctx context.Context, to string, step func(context.Context, *sql.Tx) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("observer: migrate %s to schema %s: %w", s.path, to, err)
	}
	defer tx.Rollback()
	if err := step(ctx, tx); err != nil {
		return fmt.Errorf("observer: migrate %s to schema %s: %w", s.path, to, err)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE meta SET v = ? WHERE k = 'schema'`, to); err != nil {
		return fmt.Errorf("observer: migrate %s to schema %s: %w", s.path, to, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("observer: migrate %s to schema %s: %w", s.path, to, err)
	}
	return nil
}

// keyHash is what the store keeps of a record's key: enough to find the
// records with a key an operator types, not the key itself. 0 is never
// returned, so a hash is never confused with no key.
func keyHash(key []byte) int64 {
	h := fnv.New64a()
	h.Write(key)
	return int64(h.Sum64() | 1)
}

// KeyRecords returns the coordinates, by topic ID, of up to limit stored
// records whose key is key, newest first. A store written before keys were
// kept finds none.
func (s *Store) KeyRecords(ctx context.Context, key string, limit int) ([]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT c.topic, c.part, r.off FROM records r JOIN channels c ON c.id = r.ch
		WHERE r.key_hash = ? ORDER BY r.id DESC LIMIT ?`, keyHash([]byte(key)), limit)
	if err != nil {
		return nil, fmt.Errorf("observer: records with key %q: %w", key, err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var topic []byte
		var c headers.Coordinate
		if err := rows.Scan(&topic, &c.Partition, &c.Offset); err != nil {
			return nil, fmt.Errorf("observer: records with key %q: %w", key, err)
		}
		copy(c.Topic[:], topic)
		out = append(out, c.String())
	}
	return out, rows.Err()
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Ping checks that the store's database answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.db.PingContext(ctx); err != nil {
		return fmt.Errorf("observer: store %s: %w", s.path, err)
	}
	return nil
}

// encodeStampHeaders keeps a record's stamp headers verbatim, in order,
// duplicates included, so an undecodable stamp can be shown and decoded
// again later: per header a uvarint key length, the key, a uvarint value
// length, the value.
func encodeStampHeaders[H headers.HeaderLike](dst []byte, hs []H) []byte {
	for _, h := range hs {
		hh := headers.Header(h)
		if !isStampHeader(hh.Key) {
			continue
		}
		dst = binary.AppendUvarint(dst, uint64(len(hh.Key)))
		dst = append(dst, hh.Key...)
		dst = binary.AppendUvarint(dst, uint64(len(hh.Value)))
		dst = append(dst, hh.Value...)
	}
	return dst
}

func isStampHeader(k string) bool {
	return k == headers.HeaderVC || k == headers.HeaderVCSender || k == headers.HeaderVCSeq || k == headers.HeaderCauses
}

// errCorruptStore is wrapped when the store's own encoding does not parse.
var errCorruptStore = errors.New("corrupt stamp headers in store")

func decodeStampHeaders(b []byte) ([]headers.Header, error) {
	var hs []headers.Header
	for len(b) > 0 {
		kl, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < kl {
			return nil, errCorruptStore
		}
		k := string(b[n : n+int(kl)])
		b = b[n+int(kl):]
		vl, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < vl {
			return nil, errCorruptStore
		}
		hs = append(hs, headers.Header{Key: k, Value: b[n : n+int(vl)]})
		b = b[n+int(vl):]
	}
	return hs, nil
}

// ChannelInfo is what the store knows about one channel.
type ChannelInfo struct {
	Channel headers.Channel
	Name    string // topic name, when known
	Start   int64  // first position consumed from; -1 if not consumed
	Next    int64  // position: everything below was fetched or skipped; -1 if not consumed
	Pruned  int64  // records below this offset may have been pruned
}

// Channels returns every channel the store knows, consumed or only
// claimed, in channel order.
func (s *Store) Channels(ctx context.Context) ([]ChannelInfo, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT topic, part, name, start_off, next_off, pruned_below FROM channels`)
	if err != nil {
		return nil, fmt.Errorf("observer: list channels: %w", err)
	}
	defer rows.Close()
	var out []ChannelInfo
	for rows.Next() {
		var ci ChannelInfo
		var topic []byte
		if err := rows.Scan(&topic, &ci.Channel.Partition, &ci.Name, &ci.Start, &ci.Next, &ci.Pruned); err != nil {
			return nil, fmt.Errorf("observer: list channels: %w", err)
		}
		copy(ci.Channel.Topic[:], topic)
		out = append(out, ci)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("observer: list channels: %w", err)
	}
	sortChannels(out)
	return out, nil
}

// Record is one stored record: its coordinate and what its stamp said.
type Record struct {
	Coordinate headers.Coordinate
	Topic      string // topic name, when known
	Timestamp  int64  // milliseconds since the epoch
	Control    bool   // a transaction marker
	Aborted    bool   // a record of an aborted transaction (read uncommitted only)
	Pending    bool   // a transactional record whose commit or abort is not yet seen
	Stamped    bool   // carries stamp headers
	Tagged     bool
	Sender     headers.SenderID
	Seq        int64
	Offsets    int // offset entries in its clock
	Seqs       int // sequence entries in its clock
	HeaderSize int // bytes of stamp headers (keys and values)
	// Headers are the record's stamp headers: verbatim when the stamp does
	// not decode; else re-encoded from the stored stamp, in the dialects
	// the record carried (the same stamp, not necessarily the same bytes).
	Headers []headers.Header
	Err     string // why the stamp does not decode, if it does not
	id      int64
	stamp   *headers.Stamp // decoded when the store kept the compact form
}

// Stamp returns the record's stamp, decoded from the store.
func (r *Record) Stamp() (*headers.Stamp, error) {
	if r.stamp != nil {
		var st headers.Stamp
		st.Clock.CopyFrom(&r.stamp.Clock)
		st.Tagged, st.Sender, st.Seq = r.stamp.Tagged, r.stamp.Sender, r.stamp.Seq
		return &st, nil
	}
	var st headers.Stamp
	if err := headers.ReadStamp(&st, r.Headers); err != nil {
		return nil, fmt.Errorf("observer: stamp of %s: %w", r.Coordinate, err)
	}
	return &st, nil
}

// ErrNotFound is wrapped when a record or topic is not in the store.
var ErrNotFound = errors.New("not found")

const recordCols = `r.id, c.topic, c.part, c.name, r.off, r.ts, r.kind, r.stamped, r.tagged, coalesce(s.sender, x''), r.seq, r.n_off, r.n_seq, r.hdr_bytes, r.stamp, coalesce(r.err, '')`
const recordFrom = ` FROM records r JOIN channels c ON c.id = r.ch LEFT JOIN senders s ON s.id = r.sender AND r.tagged `

type scanner interface{ Scan(...any) error }

func scanRecord(sc scanner) (*Record, error) {
	var r Record
	var topic, sender, stamp []byte
	var kind recordKind
	if err := sc.Scan(&r.id, &topic, &r.Coordinate.Partition, &r.Topic, &r.Coordinate.Offset, &r.Timestamp, &kind,
		&r.Stamped, &r.Tagged, &sender, &r.Seq, &r.Offsets, &r.Seqs, &r.HeaderSize, &stamp, &r.Err); err != nil {
		return nil, err
	}
	copy(r.Coordinate.Topic[:], topic)
	copy(r.Sender[:], sender)
	r.Control, r.Aborted, r.Pending = kind == kindControl, kind == kindAborted, kind == kindPending
	hs, st, err := storedHeaders(stamp)
	if err != nil {
		return nil, fmt.Errorf("observer: record %s: %w", r.Coordinate, err)
	}
	r.Headers, r.stamp = hs, st
	return &r, nil
}

// Record returns the stored record at c, or an error wrapping ErrNotFound.
func (s *Store) Record(ctx context.Context, c headers.Coordinate) (*Record, error) {
	row := s.db.QueryRowContext(ctx, `SELECT `+recordCols+recordFrom+`WHERE c.topic = ? AND c.part = ? AND r.off = ?`,
		c.Topic[:], c.Partition, c.Offset)
	r, err := scanRecord(row)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("observer: record %s: %w", c, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("observer: read record %s: %w", c, err)
	}
	return r, nil
}

// Resolve turns a Ref into a coordinate, looking a topic name up among the
// channels the store knows.
func (s *Store) Resolve(ctx context.Context, r Ref) (headers.Coordinate, error) {
	if r.ByID {
		return headers.Coordinate{Channel: headers.Channel{Topic: r.ID, Partition: r.Partition}, Offset: r.Offset}, nil
	}
	var topic []byte
	err := s.db.QueryRowContext(ctx, `SELECT topic FROM channels WHERE name = ? ORDER BY start_off >= 0 DESC, id DESC LIMIT 1`, r.Topic).Scan(&topic)
	if errors.Is(err, sql.ErrNoRows) {
		return headers.Coordinate{}, fmt.Errorf("observer: topic %q: %w", r.Topic, ErrNotFound)
	}
	if err != nil {
		return headers.Coordinate{}, fmt.Errorf("observer: look up topic %q: %w", r.Topic, err)
	}
	var c headers.Coordinate
	copy(c.Topic[:], topic)
	c.Partition, c.Offset = r.Partition, r.Offset
	return c, nil
}

// TopicName returns the stored name of a topic ID, or "" if unknown.
func (s *Store) TopicName(ctx context.Context, id headers.TopicID) string {
	var name string
	_ = s.db.QueryRowContext(ctx, `SELECT name FROM channels WHERE topic = ? AND name != '' LIMIT 1`, id[:]).Scan(&name)
	return name
}

// Prune deletes records older than minTS (milliseconds; 0 for no age
// bound) and, beyond that, the oldest records until at most maxRecords
// remain (0 for no size bound), with their claims. Findings stay.
func (s *Store) Prune(ctx context.Context, minTS int64, maxRecords int64) (int64, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return 0, fmt.Errorf("observer: prune: %w", err)
	}
	defer tx.Rollback()
	var cut int64 // delete records with id < cut
	if minTS > 0 {
		var id sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT max(id) FROM records WHERE ts < ?`, minTS).Scan(&id); err != nil {
			return 0, fmt.Errorf("observer: prune: %w", err)
		}
		if id.Valid {
			cut = id.Int64 + 1
		}
	}
	if maxRecords > 0 {
		var maxID sql.NullInt64
		if err := tx.QueryRowContext(ctx, `SELECT max(id) FROM records`).Scan(&maxID); err != nil {
			return 0, fmt.Errorf("observer: prune: %w", err)
		}
		if maxID.Valid && maxID.Int64-maxRecords+1 > cut {
			cut = maxID.Int64 - maxRecords + 1
		}
	}
	if cut <= 0 {
		return 0, nil
	}
	if _, err := tx.ExecContext(ctx, `UPDATE channels SET pruned_below = max(pruned_below,
		coalesce((SELECT max(off) + 1 FROM records r WHERE r.ch = channels.id AND r.id < ?), 0))`, cut); err != nil {
		return 0, fmt.Errorf("observer: prune: %w", err)
	}
	// Statistics go by whole runs of 64 offsets: a run partly pruned keeps
	// counting until all of it is.
	if _, err := tx.ExecContext(ctx, `DELETE FROM chan_stats
		WHERE (bucket + 1) * 64 <= (SELECT pruned_below FROM channels WHERE id = chan_stats.ch)`); err != nil {
		return 0, fmt.Errorf("observer: prune: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM gaps WHERE to_off <= (SELECT pruned_below FROM channels WHERE id = gaps.ch)`); err != nil {
		return 0, fmt.Errorf("observer: prune: %w", err)
	}
	if err := pruneClaims(ctx, tx, cut); err != nil {
		return 0, fmt.Errorf("observer: prune: %w", err)
	}
	if err := pruneSeqs(ctx, tx, cut); err != nil {
		return 0, fmt.Errorf("observer: prune: %w", err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM seq_claims WHERE rec < ?`, cut); err != nil {
		return 0, fmt.Errorf("observer: prune: %w", err)
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM records WHERE id < ? AND id NOT IN (SELECT last_rec FROM sender_state)`, cut)
	if err != nil {
		return 0, fmt.Errorf("observer: prune: %w", err)
	}
	n, _ := res.RowsAffected()
	if err := tx.Commit(); err != nil {
		return 0, fmt.Errorf("observer: prune: %w", err)
	}
	return n, nil
}

func itoa(v int64) string { return strconv.FormatInt(v, 10) }

// placeholders returns "(?,?,?),(?,?,?)…" for n rows of k columns.
func placeholders(n, k int) string {
	row := "(" + strings.TrimSuffix(strings.Repeat("?,", k), ",") + ")"
	return strings.TrimSuffix(strings.Repeat(row+",", n), ",")
}

// RecordTime returns the timestamp of the stored record ref names, and
// whether the store holds it.
func (s *Store) RecordTime(ctx context.Context, ref Ref) (time.Time, bool) {
	c, err := s.Resolve(ctx, ref)
	if err != nil {
		return time.Time{}, false
	}
	var ts int64
	err = s.db.QueryRowContext(ctx, `SELECT r.ts FROM records r JOIN channels c ON c.id = r.ch WHERE c.topic = ? AND c.part = ? AND r.off = ?`,
		c.Topic[:], c.Partition, c.Offset).Scan(&ts)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(ts).UTC(), true
}
