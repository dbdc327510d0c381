package observer

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/parsley-go/parsley/headers"
)

// incoming is one fetched record as the ingester sees it: its channel (by
// topic ID), topic name, offset, timestamp and headers. Control records are
// transaction markers.
type incoming struct {
	Channel   headers.Channel
	Topic     string
	Offset    int64
	Key       []byte // nil when the record has none
	Timestamp int64  // milliseconds since the epoch
	Control   bool
	Headers   []headers.Header
	// Transactional records stay pending until their producer's marker:
	// a commit marker makes them data, an abort marker aborted.
	Transactional bool
	ProducerID    int64
	// Commit, on a control record, says it is a commit (not an abort) marker.
	Commit bool
}

type senderKey struct{ ch, sender int64 }

type senderState struct {
	lastSeq, lastRec, lastOff int64
	clock                     *headers.Clock
	dirty                     bool
}

type chanState struct {
	id          int64
	ch          headers.Channel
	name        string
	start, next int64
	dirty       bool
	// prev is the clock of the channel's last data record (empty when it
	// was unstamped or undecodable). A claim the previous record already
	// made is not indexed again: a run of records carrying the same claim
	// is indexed by its first record, and Descendants extends the run by
	// reading forward. It keeps the claim index near the number of claims
	// that change, not the stamp width.
	prev headers.Clock
}

// writer turns fetched records into store rows and per-record findings. It
// is the store's only writer and is not safe for concurrent use.
type writer struct {
	st       *Store
	chans    map[headers.Channel]*chanState
	senders  map[headers.SenderID]int64
	state    map[senderKey]*senderState
	nextRec  int64
	stamp    headers.Stamp
	rows     []recordRow // buffered records rows
	recArgs  []any       // their insert arguments, reused
	clmArgs  []any
	blocks   map[blockKey]*claimBlock // a batch's open blocks of offset claims
	closed   []*claimBlock            // and its full ones
	agg      map[statsKey]*stats
	seqArgs  []any
	stmts    map[string]*sql.Stmt
	findings []Finding
	hdrBuf   []byte
	// uncommitted: records of open and aborted transactions are fetched.
	uncommitted bool
	place       placement // partition counts for checkPlacement (placement.go)
	// broken, once set, is returned by every call: the caches could not be
	// rebuilt after a failed batch.
	broken error
}

// statsKey names a run of 64 offsets of a channel.
type statsKey struct{ ch, bucket int64 }

// stats accumulates one batch's contribution to a chan_stats row.
type stats struct {
	data, marker, stamped, undecodable, entries, maxEntries, bytes, minTS int64
	firstStamped, firstUnstamped, lastStamped                             sql.NullInt64
}

func (w *writer) stats(ch, off, ts int64) *stats {
	k := statsKey{ch, off >> 6}
	s, ok := w.agg[k]
	if !ok {
		s = &stats{minTS: ts}
		w.agg[k] = s
	}
	s.minTS = min(s.minTS, ts)
	return s
}

func setFirst(v *sql.NullInt64, id int64) {
	if !v.Valid {
		*v = sql.NullInt64{Int64: id, Valid: true}
	}
}

func newWriter(ctx context.Context, st *Store) (*writer, error) {
	w := &writer{st: st, stmts: make(map[string]*sql.Stmt), agg: map[statsKey]*stats{}, blocks: map[blockKey]*claimBlock{}}
	if err := w.load(ctx); err != nil {
		return nil, err
	}
	return w, nil
}

// load rebuilds the in-memory caches from the store, at start and after a
// failed batch so memory never runs ahead of what was committed.
func (w *writer) load(ctx context.Context) error {
	w.chans = make(map[headers.Channel]*chanState)
	w.senders = make(map[headers.SenderID]int64)
	w.state = make(map[senderKey]*senderState)
	db := w.st.db
	rows, err := db.QueryContext(ctx, `SELECT id, topic, part, name, start_off, next_off FROM channels`)
	if err != nil {
		return fmt.Errorf("observer: load channels: %w", err)
	}
	for rows.Next() {
		cs := new(chanState)
		var topic []byte
		if err := rows.Scan(&cs.id, &topic, &cs.ch.Partition, &cs.name, &cs.start, &cs.next); err != nil {
			rows.Close()
			return fmt.Errorf("observer: load channels: %w", err)
		}
		copy(cs.ch.Topic[:], topic)
		w.chans[cs.ch] = cs
	}
	rows.Close()
	rows, err = db.QueryContext(ctx, `SELECT id, sender FROM senders`)
	if err != nil {
		return fmt.Errorf("observer: load senders: %w", err)
	}
	for rows.Next() {
		var id int64
		var b []byte
		if err := rows.Scan(&id, &b); err != nil {
			rows.Close()
			return fmt.Errorf("observer: load senders: %w", err)
		}
		w.senders[headers.SenderID(b)] = id
	}
	rows.Close()
	rows, err = db.QueryContext(ctx, `SELECT ss.ch, ss.sender, ss.last_seq, ss.last_rec, r.off, r.stamp FROM sender_state ss JOIN records r ON r.id = ss.last_rec`)
	if err != nil {
		return fmt.Errorf("observer: load sender state: %w", err)
	}
	for rows.Next() {
		var k senderKey
		s := new(senderState)
		var stamp []byte
		if err := rows.Scan(&k.ch, &k.sender, &s.lastSeq, &s.lastRec, &s.lastOff, &stamp); err != nil {
			rows.Close()
			return fmt.Errorf("observer: load sender state: %w", err)
		}
		s.clock = new(headers.Clock)
		if hs, err := decodeStampHeaders(stamp); err == nil {
			var st headers.Stamp
			if headers.ReadStamp(&st, hs) == nil {
				s.clock.CopyFrom(&st.Clock)
			}
		}
		w.state[k] = s
	}
	rows.Close()
	rows, err = db.QueryContext(ctx, `SELECT c.topic, c.part, r.stamp FROM records r JOIN channels c ON c.id = r.ch
		WHERE r.off = (SELECT max(off) FROM records WHERE ch = r.ch AND kind != `+sqlKindControl+`) AND r.err IS NULL`)
	if err != nil {
		return fmt.Errorf("observer: load last stamps: %w", err)
	}
	for rows.Next() {
		var topic, stamp []byte
		var ch headers.Channel
		if err := rows.Scan(&topic, &ch.Partition, &stamp); err != nil {
			rows.Close()
			return fmt.Errorf("observer: load last stamps: %w", err)
		}
		copy(ch.Topic[:], topic)
		if cs, ok := w.chans[ch]; ok {
			if hs, err := decodeStampHeaders(stamp); err == nil {
				var st headers.Stamp
				if headers.ReadStamp(&st, hs) == nil {
					cs.prev.CopyFrom(&st.Clock)
				}
			}
		}
	}
	rows.Close()
	var max sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT max(id) FROM records`).Scan(&max); err != nil {
		return fmt.Errorf("observer: load: %w", err)
	}
	w.nextRec = max.Int64 + 1
	return nil
}

// channel returns the state of ch, creating its row inside tx if new.
func (w *writer) channel(ctx context.Context, tx *sql.Tx, ch headers.Channel, name string) (*chanState, error) {
	if cs, ok := w.chans[ch]; ok {
		if cs.name == "" && name != "" {
			cs.name, cs.dirty = name, true
		}
		return cs, nil
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO channels(topic, part, name) VALUES(?, ?, ?)`, ch.Topic[:], ch.Partition, name)
	if err != nil {
		return nil, fmt.Errorf("observer: add channel %s: %w", ch, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return nil, fmt.Errorf("observer: add channel %s: %w", ch, err)
	}
	cs := &chanState{id: id, ch: ch, name: name, start: -1, next: -1}
	w.chans[ch] = cs
	return cs, nil
}

func (w *writer) sender(ctx context.Context, tx *sql.Tx, s headers.SenderID) (int64, error) {
	if id, ok := w.senders[s]; ok {
		return id, nil
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO senders(sender) VALUES(?)`, s[:])
	if err != nil {
		return 0, fmt.Errorf("observer: add sender %s: %w", s, err)
	}
	id, err := res.LastInsertId()
	if err != nil {
		return 0, fmt.Errorf("observer: add sender %s: %w", s, err)
	}
	w.senders[s] = id
	return id, nil
}

// markConsumed records that ch is consumed from start, for a channel with
// no stored position yet.
func (w *writer) markConsumed(ctx context.Context, ch headers.Channel, name string, start int64) (err error) {
	if w.broken != nil {
		return w.broken
	}
	tx, err := w.st.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("observer: mark %s consumed: %w", ch, err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
			w.reload(ctx) // the channel row may be in memory but not in the store
		}
	}()
	cs, err := w.channel(ctx, tx, ch, name)
	if err != nil {
		return err
	}
	if cs.start < 0 {
		cs.start, cs.next, cs.dirty = start, start, true
	}
	if err := w.flushChannels(ctx, tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("observer: mark %s consumed: %w", ch, err)
	}
	return nil
}

// errWriterFailed is wrapped once a writer could not rebuild its caches
// from the store after a failed batch: it refuses further batches rather
// than let memory run ahead of what was committed.
var errWriterFailed = errors.New("observer: store writer failed")

// Ingest stores a batch of fetched records in one transaction. Records of
// one channel must come in offset order. After a failed batch the writer
// rebuilds its caches from the store; if that fails too, the writer is
// broken and every later call returns an error wrapping errWriterFailed.
func (w *writer) ingest(ctx context.Context, batch []incoming) (err error) {
	if w.broken != nil {
		return w.broken
	}
	tx, err := w.st.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("observer: ingest: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
			w.rows, w.clmArgs, w.seqArgs, w.findings, w.closed = w.rows[:0], w.clmArgs[:0], w.seqArgs[:0], w.findings[:0], w.closed[:0]
			clear(w.agg)
			clear(w.blocks)
			w.reload(ctx)
		}
	}()
	for i := range batch {
		if err := w.add(ctx, tx, &batch[i]); err != nil {
			return err
		}
	}
	if err := w.flush(ctx, tx, true); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("observer: ingest: commit: %w", err)
	}
	return nil
}

// reload rebuilds the caches after a failed transaction, or marks the
// writer broken.
func (w *writer) reload(ctx context.Context) {
	if err := w.load(context.WithoutCancel(ctx)); err != nil {
		w.broken = fmt.Errorf("%w: reload after a failed batch: %w", errWriterFailed, err)
	}
}

// recordRow is one row of the records table.
type recordRow struct {
	id, ch, off, ts int64
	kind            recordKind
	stamped, tagged bool
	sender, seq     int64
	nOff, nSeq      int
	hdrBytes        int
	stamp           []byte // the stamp headers as encodeStampHeaders writes them; nil if none
	err             string // why the stamp does not decode; "" if it does
	pid             int64  // producer ID of a transactional record, else -1
	keyHash         int64  // keyHash of its key; 0 without one
}

// recInsert lists the records columns in the order appendArgs gives them.
const recInsert = `INSERT INTO records(id, ch, off, ts, kind, stamped, tagged, sender, seq, n_off, n_seq, hdr_bytes, stamp, err, pid, key_hash) VALUES `

// recCols is the number of columns in recInsert; TestRecordRowMatchesInsert
// checks appendArgs against it.
const recCols = 16

func (r *recordRow) appendArgs(args []any) []any {
	var stamp, errText, key any
	if r.stamp != nil {
		stamp = r.stamp
	}
	if r.err != "" {
		errText = r.err
	}
	if r.keyHash != 0 {
		key = r.keyHash
	}
	return append(args, r.id, r.ch, r.off, r.ts, int(r.kind), r.stamped, r.tagged, r.sender, r.seq,
		r.nOff, r.nSeq, r.hdrBytes, stamp, errText, r.pid, key)
}

// add stores one record: it moves the channel's position, notes skipped
// offsets, and hands the record to the method for its kind.
func (w *writer) add(ctx context.Context, tx *sql.Tx, in *incoming) error {
	cs, err := w.channel(ctx, tx, in.Channel, in.Topic)
	if err != nil {
		return err
	}
	if cs.start < 0 {
		cs.start = in.Offset
	}
	if in.Offset < cs.next {
		return nil // already stored: a re-fetch after restart
	}
	if cs.next >= 0 && in.Offset > cs.next {
		// The fetch skipped offsets: aborted records (or compaction).
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO gaps(ch, from_off, to_off) VALUES(?, ?, ?)`, cs.id, cs.next, in.Offset); err != nil {
			return fmt.Errorf("observer: ingest: gap %d..%d on %s: %w", cs.next, in.Offset, in.Channel, err)
		}
	}
	cs.next, cs.dirty = in.Offset+1, true
	row := recordRow{id: w.nextRec, ch: cs.id, off: in.Offset, ts: in.Timestamp, kind: kindData, pid: -1}
	if len(in.Key) > 0 {
		row.keyHash = keyHash(in.Key)
	}
	w.nextRec++
	if in.Control {
		return w.addMarker(ctx, tx, cs, in, row)
	}
	if in.Transactional {
		row.kind, row.pid = kindPending, in.ProducerID
	}
	w.hdrBuf = encodeStampHeaders(w.hdrBuf[:0], in.Headers)
	row.stamped = len(w.hdrBuf) > 0
	for _, h := range in.Headers {
		if isStampHeader(h.Key) {
			row.hdrBytes += len(h.Key) + len(h.Value)
		}
	}
	if row.stamped {
		row.stamp = slices.Clone(w.hdrBuf)
	}
	if derr := headers.ReadStamp(&w.stamp, in.Headers); derr != nil {
		return w.addUndecodable(ctx, tx, cs, in, row, derr)
	}
	return w.addData(ctx, tx, cs, in, row, &w.stamp)
}

// addMarker stores a transaction marker and settles its producer's open
// records on the channel: committed or aborted.
func (w *writer) addMarker(ctx context.Context, tx *sql.Tx, cs *chanState, in *incoming, row recordRow) error {
	w.stats(cs.id, in.Offset, in.Timestamp).marker++
	row.kind, row.pid = kindControl, in.ProducerID
	w.rows = append(w.rows, row)
	// The producer's open records must be written before they are settled.
	if err := w.flushRecords(ctx, tx, true); err != nil {
		return err
	}
	kind := kindAborted
	if in.Commit {
		kind = kindData
	}
	if _, err := tx.ExecContext(ctx, `UPDATE records SET kind = ? WHERE ch = ? AND pid = ? AND kind = ?`, kind, cs.id, in.ProducerID, kindPending); err != nil {
		return fmt.Errorf("observer: ingest: settle transaction of producer %d on %s: %w", in.ProducerID, in.Channel, err)
	}
	return nil
}

// addUndecodable stores a record whose stamp headers do not decode, with
// its finding.
func (w *writer) addUndecodable(ctx context.Context, tx *sql.Tx, cs *chanState, in *incoming, row recordRow, derr error) error {
	at := headers.Coordinate{Channel: in.Channel, Offset: in.Offset}
	row.stamped, row.err = true, derr.Error()
	w.rows = append(w.rows, row)
	cs.prev.Reset()
	agg := w.stats(cs.id, in.Offset, in.Timestamp)
	agg.data++
	agg.undecodable++
	w.finding(CodeUndecodableStamp, "undecodable-stamp|"+at.String(), in.Topic,
		fmt.Sprintf("record %s of topic %q: %v", at, in.Topic, derr), at.String())
	return w.flush(ctx, tx, false)
}

// addData stores a data record (stamped or not), indexes the claims its
// stamp adds to its channel's previous record, and checks its sender.
func (w *writer) addData(ctx context.Context, tx *sql.Tx, cs *chanState, in *incoming, row recordRow, st *headers.Stamp) error {
	at := headers.Coordinate{Channel: in.Channel, Offset: in.Offset}
	var err error
	if st.Tagged {
		if row.sender, err = w.sender(ctx, tx, st.Sender); err != nil {
			return err
		}
	}
	agg := w.stats(cs.id, in.Offset, in.Timestamp)
	agg.data++
	if row.stamped {
		n := int64(st.Clock.NumOffsets() + st.Clock.NumSeqs())
		agg.stamped++
		agg.entries += n
		agg.maxEntries = max(agg.maxEntries, n)
		agg.bytes += int64(row.hdrBytes)
		setFirst(&agg.firstStamped, row.id)
		agg.lastStamped = sql.NullInt64{Int64: row.id, Valid: true}
	} else {
		setFirst(&agg.firstUnstamped, row.id)
	}
	row.tagged, row.seq, row.nOff, row.nSeq = st.Tagged, st.Seq, st.Clock.NumOffsets(), st.Clock.NumSeqs()
	w.rows = append(w.rows, row)
	for e := range st.Clock.OffsetEntries() {
		if e.Channel == in.Channel && e.Offset >= in.Offset {
			// Decidable from the record alone: no position at or above its
			// own was assigned when it was sent (the naive log-end stamp).
			claimed := headers.Coordinate{Channel: e.Channel, Offset: e.Offset}
			w.finding(CodeUnsettleableClaim, "unsettleable-claim|self|"+at.String(), in.Topic,
				fmt.Sprintf("record %s (topic %q) claims %s on its own channel, at or past its own position: a position not assigned when it was sent",
					at, in.Topic, claimed), at.String(), claimed.String())
		}
		if v, ok := cs.prev.Offset(e.Channel); ok && v == e.Offset {
			continue
		}
		tcs, err := w.channel(ctx, tx, e.Channel, "")
		if err != nil {
			return err
		}
		w.claim(cs.id, tcs.id, e.Offset, row.id)
	}
	for e := range st.Clock.SeqEntries() {
		if v, ok := cs.prev.Seq(e.Channel, e.Sender); ok && v == e.Seq {
			continue
		}
		tcs, err := w.channel(ctx, tx, e.Channel, "")
		if err != nil {
			return err
		}
		sid, err := w.sender(ctx, tx, e.Sender)
		if err != nil {
			return err
		}
		w.seqArgs = append(w.seqArgs, tcs.id, sid, e.Seq, row.id)
	}
	cs.prev.CopyFrom(&st.Clock)
	w.checkPlacement(in, st)
	// Reading uncommitted, a stage's aborted sends show up and their
	// sequence numbers are reused by the redo: judge senders only on
	// records known to be committed.
	if st.Tagged && !(in.Transactional && w.uncommitted) {
		w.checkSender(senderKey{cs.id, row.sender}, at, in.Topic, row.id, st)
	}
	return w.flush(ctx, tx, false)
}

// checkSender compares a tagged record with the same sender's previous
// record on the same channel: its sequence must be the next one, and its
// clock must claim at least what the previous one claimed on every entry
// both carry. An entry that disappears is not a regression: truncation
// and rescoping drop entries on purpose.
func (w *writer) checkSender(k senderKey, at headers.Coordinate, topic string, rec int64, st *headers.Stamp) {
	prev, ok := w.state[k]
	if !ok {
		prev = &senderState{clock: new(headers.Clock)}
		w.state[k] = prev
	} else {
		prevAt := headers.Coordinate{Channel: at.Channel, Offset: prev.lastOff}
		switch {
		case st.Seq > prev.lastSeq+1:
			w.finding(CodeSequenceGap, fmt.Sprintf("sequence-gap|%s|%s|%d", at.Channel, st.Sender, prev.lastSeq), topic,
				fmt.Sprintf("sender %s skipped sequence %d..%d on %s (topic %q): seq %d at %s, then seq %d at %s",
					st.Sender, prev.lastSeq+1, st.Seq-1, at.Channel, topic, prev.lastSeq, prevAt, st.Seq, at),
				at.String(), prevAt.String())
		case st.Seq <= prev.lastSeq:
			w.finding(CodeStampRegression, "stamp-regression|"+at.String(), topic,
				fmt.Sprintf("sender %s's send sequence on %s (topic %q) went back from %d at %s to %d at %s",
					st.Sender, at.Channel, topic, prev.lastSeq, prevAt, st.Seq, at),
				at.String(), prevAt.String())
		}
		if why := regression(prev.clock, &st.Clock); why != "" {
			w.finding(CodeStampRegression, "stamp-regression|clock|"+at.String(), topic,
				fmt.Sprintf("sender %s's stamp at %s (topic %q) %s than its earlier stamp at %s", st.Sender, at, topic, why, prevAt),
				at.String(), prevAt.String())
		}
	}
	prev.lastSeq, prev.lastRec, prev.lastOff, prev.dirty = st.Seq, rec, at.Offset, true
	prev.clock.CopyFrom(&st.Clock)
}

// regression describes the first entry on which later claims less than
// earlier, or returns "".
func regression(earlier, later *headers.Clock) string {
	if later.Dominates(earlier) {
		return "" // the common case, one linear walk
	}
	for e := range earlier.OffsetEntries() {
		if v, ok := later.Offset(e.Channel); ok && v < e.Offset {
			return fmt.Sprintf("claims offset %d on %s, less", v, e.Channel)
		}
	}
	for e := range earlier.SeqEntries() {
		if v, ok := later.Seq(e.Channel, e.Sender); ok && v < e.Seq {
			return fmt.Sprintf("claims sequence %d of sender %s on %s, less", v, e.Sender, e.Channel)
		}
	}
	return ""
}

func (w *writer) finding(code Code, key, topic, summary string, coords ...string) {
	w.findings = append(w.findings, Finding{
		Key: key, Code: code, Severity: code.Severity(), Topic: topic, Coordinates: coords, Summary: summary, Action: code.Action(), Count: 1,
	})
}

const (
	recChunk = 64
	clmChunk = 128
	seqChunk = 192
)

// flushRecords writes buffered record rows in full chunks, and all of them
// when all is set.
func (w *writer) flushRecords(ctx context.Context, tx *sql.Tx, all bool) error {
	n := len(w.rows)
	if !all {
		n -= n % recChunk
	}
	if n == 0 {
		return nil
	}
	w.recArgs = w.recArgs[:0]
	for i := range n {
		w.recArgs = w.rows[i].appendArgs(w.recArgs)
	}
	w.rows = append(w.rows[:0], w.rows[n:]...)
	var err error
	w.recArgs, err = w.flushRows(ctx, tx, recInsert, w.recArgs, recCols, recChunk, true)
	return err
}

// flush writes buffered rows in full chunks, and everything when all is
// set. Multi-row inserts through cached statements keep ingest fast.
func (w *writer) flush(ctx context.Context, tx *sql.Tx, all bool) error {
	if err := w.flushRecords(ctx, tx, all); err != nil {
		return err
	}
	var err error
	if all {
		w.clmArgs = w.blockArgs(w.clmArgs)
	}
	if w.clmArgs, err = w.flushRows(ctx, tx, `INSERT INTO claims(ch, lo, rec, hi, last, pairs) VALUES `, w.clmArgs, 6, clmChunk, all); err != nil {
		return err
	}
	if w.seqArgs, err = w.flushRows(ctx, tx, `INSERT OR IGNORE INTO seq_claims(ch, sender, value, rec) VALUES `, w.seqArgs, 4, seqChunk, all); err != nil {
		return err
	}
	if !all {
		return nil
	}
	for k, s := range w.state {
		if !s.dirty {
			continue
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO sender_state(ch, sender, last_seq, last_rec) VALUES(?, ?, ?, ?)
			ON CONFLICT(ch, sender) DO UPDATE SET last_seq = excluded.last_seq, last_rec = excluded.last_rec`,
			k.ch, k.sender, s.lastSeq, s.lastRec); err != nil {
			return fmt.Errorf("observer: ingest: sender state: %w", err)
		}
		s.dirty = false
	}
	if err := w.flushChannels(ctx, tx); err != nil {
		return err
	}
	for k, a := range w.agg {
		if _, err := tx.ExecContext(ctx, `INSERT INTO chan_stats(ch, bucket, n_data, n_marker, n_stamped, n_undecodable,
				sum_entries, max_entries, sum_bytes, min_ts, first_stamped, first_unstamped, last_stamped)
			VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT(ch, bucket) DO UPDATE SET n_data = n_data + excluded.n_data, n_marker = n_marker + excluded.n_marker,
				n_stamped = n_stamped + excluded.n_stamped, n_undecodable = n_undecodable + excluded.n_undecodable,
				sum_entries = sum_entries + excluded.sum_entries, max_entries = max(max_entries, excluded.max_entries),
				sum_bytes = sum_bytes + excluded.sum_bytes, min_ts = min(min_ts, excluded.min_ts),
				first_stamped = coalesce(first_stamped, excluded.first_stamped),
				first_unstamped = coalesce(first_unstamped, excluded.first_unstamped),
				last_stamped = coalesce(excluded.last_stamped, last_stamped)`,
			k.ch, k.bucket, a.data, a.marker, a.stamped, a.undecodable, a.entries, a.maxEntries, a.bytes, a.minTS,
			a.firstStamped, a.firstUnstamped, a.lastStamped); err != nil {
			return fmt.Errorf("observer: ingest: statistics: %w", err)
		}
	}
	clear(w.agg)
	if err := storeIngestFindings(ctx, tx, w.findings); err != nil {
		return err
	}
	w.findings = w.findings[:0]
	return nil
}

func (w *writer) flushChannels(ctx context.Context, tx *sql.Tx) error {
	for _, cs := range w.chans {
		if !cs.dirty {
			continue
		}
		if _, err := tx.ExecContext(ctx, `UPDATE channels SET name = ?, start_off = ?, next_off = ? WHERE id = ?`,
			cs.name, cs.start, cs.next, cs.id); err != nil {
			return fmt.Errorf("observer: ingest: position of %s: %w", cs.ch, err)
		}
		cs.dirty = false
	}
	return nil
}

func (w *writer) flushRows(ctx context.Context, tx *sql.Tx, prefix string, args []any, cols, chunk int, all bool) ([]any, error) {
	per := cols * chunk
	for len(args) >= per || (all && len(args) > 0) {
		n := min(len(args), per)
		q := prefix + placeholders(n/cols, cols)
		stmt, ok := w.stmts[q]
		if !ok {
			var err error
			if stmt, err = w.st.db.PrepareContext(ctx, q); err != nil {
				return args, fmt.Errorf("observer: ingest: prepare: %w", err)
			}
			if n == per {
				w.stmts[q] = stmt
			} else {
				defer stmt.Close()
			}
		}
		if _, err := tx.StmtContext(ctx, stmt).ExecContext(ctx, args[:n]...); err != nil {
			return args, fmt.Errorf("observer: ingest: %w", err)
		}
		args = append(args[:0], args[n:]...)
	}
	return args, nil
}

func (w *writer) close() {
	for _, s := range w.stmts {
		s.Close()
	}
}

// storeIngestFindings records findings detected at ingest: a new key is a
// new open finding; a repeat adds to its count, and a repeat of a finding
// that had resolved reopens it, with the new records, unacknowledged.
func storeIngestFindings(ctx context.Context, tx *sql.Tx, fs []Finding) error {
	now := time.Now().UnixMilli()
	for _, f := range fs {
		coords := strings.Join(f.Coordinates, " ")
		var id int64
		var resolved bool
		err := tx.QueryRowContext(ctx, `SELECT id, resolved_at IS NOT NULL FROM findings WHERE key = ?`, f.Key).Scan(&id, &resolved)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			_, err = tx.ExecContext(ctx, `INSERT INTO findings(key, code, severity, topic, coords, summary, first_seen, last_seen) VALUES(?, ?, ?, ?, ?, ?, ?, ?)`,
				f.Key, string(f.Code), int(f.Severity), f.Topic, coords, f.Summary, now, now)
		case err != nil:
		case resolved:
			_, err = tx.ExecContext(ctx, `UPDATE findings SET count = count + 1, last_seen = ?, coords = ?, summary = ?,
				resolved_at = NULL, resolved_why = '', ack_at = NULL, ack_by = '', ack_reason = '' WHERE id = ?`, now, coords, f.Summary, id)
			if err == nil {
				err = addEvent(ctx, tx, id, now, "reopened", "", "seen again: "+f.Coordinates[0])
			}
		default:
			_, err = tx.ExecContext(ctx, `UPDATE findings SET count = count + 1, last_seen = ? WHERE id = ?`, now, id)
		}
		if err != nil {
			return fmt.Errorf("observer: ingest: finding %s: %w", f.Code, err)
		}
	}
	return nil
}
