package observer

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"

	"github.com/parsley-go/parsley/headers"
)

// Incoming is one fetched record as the ingester sees it: its channel (by
// topic ID), topic name, offset, timestamp and headers. Control records are
// transaction markers.
type Incoming struct {
	Channel   headers.Channel
	Topic     string
	Offset    int64
	Timestamp int64 // milliseconds since the epoch
	Control   bool
	Headers   []headers.Header
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
	recArgs  []any
	clmArgs  []any
	seqArgs  []any
	stmts    map[string]*sql.Stmt
	findings []storedFinding
	hdrBuf   []byte
}

type storedFinding struct {
	key string
	Finding
}

func newWriter(ctx context.Context, st *Store) (*writer, error) {
	w := &writer{st: st, stmts: make(map[string]*sql.Stmt)}
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
		WHERE r.off = (SELECT max(off) FROM records WHERE ch = r.ch AND kind = 0) AND r.err IS NULL`)
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
func (w *writer) markConsumed(ctx context.Context, ch headers.Channel, name string, start int64) error {
	tx, err := w.st.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("observer: mark %s consumed: %w", ch, err)
	}
	defer tx.Rollback()
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
		w.load(context.WithoutCancel(ctx))
		return fmt.Errorf("observer: mark %s consumed: %w", ch, err)
	}
	return nil
}

// Ingest stores a batch of fetched records in one transaction. Records of
// one channel must come in offset order.
func (w *writer) ingest(ctx context.Context, batch []Incoming) (err error) {
	tx, err := w.st.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("observer: ingest: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
			w.recArgs, w.clmArgs, w.seqArgs, w.findings = w.recArgs[:0], w.clmArgs[:0], w.seqArgs[:0], w.findings[:0]
			w.load(context.WithoutCancel(ctx))
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

func (w *writer) add(ctx context.Context, tx *sql.Tx, in *Incoming) error {
	cs, err := w.channel(ctx, tx, in.Channel, in.Topic)
	if err != nil {
		return err
	}
	at := headers.Coordinate{Channel: in.Channel, Offset: in.Offset}
	if cs.start < 0 {
		cs.start = in.Offset
	}
	if in.Offset < cs.next {
		return nil // already stored: a re-fetch after restart
	}
	cs.next, cs.dirty = in.Offset+1, true
	id := w.nextRec
	w.nextRec++
	if in.Control {
		w.recArgs = append(w.recArgs, id, cs.id, in.Offset, in.Timestamp, kindControl, false, false, 0, 0, 0, 0, 0, nil, nil)
		return w.flush(ctx, tx, false)
	}
	w.hdrBuf = encodeStampHeaders(w.hdrBuf[:0], in.Headers)
	stamped := len(w.hdrBuf) > 0
	var hdrBytes int
	for _, h := range in.Headers {
		if isStampHeader(h.Key) {
			hdrBytes += len(h.Key) + len(h.Value)
		}
	}
	var stampBlob any
	if stamped {
		stampBlob = slices.Clone(w.hdrBuf)
	}
	st := &w.stamp
	if derr := headers.ReadStamp(st, in.Headers); derr != nil {
		w.recArgs = append(w.recArgs, id, cs.id, in.Offset, in.Timestamp, kindData, true, false, 0, 0, 0, 0, hdrBytes, stampBlob, derr.Error())
		cs.prev.Reset()
		w.finding(CodeUndecodableStamp, "undecodable-stamp|"+at.String(), in.Topic,
			fmt.Sprintf("record %s of topic %q: %v", at, in.Topic, derr), at.String())
		return w.flush(ctx, tx, false)
	}
	var senderID int64
	if st.Tagged {
		if senderID, err = w.sender(ctx, tx, st.Sender); err != nil {
			return err
		}
	}
	w.recArgs = append(w.recArgs, id, cs.id, in.Offset, in.Timestamp, kindData, stamped, st.Tagged, senderID, st.Seq,
		st.Clock.NumOffsets(), st.Clock.NumSeqs(), hdrBytes, stampBlob, nil)
	for e := range st.Clock.OffsetEntries() {
		if v, ok := cs.prev.Offset(e.Channel); ok && v == e.Offset {
			continue
		}
		tcs, err := w.channel(ctx, tx, e.Channel, "")
		if err != nil {
			return err
		}
		w.clmArgs = append(w.clmArgs, tcs.id, e.Offset, id)
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
		w.seqArgs = append(w.seqArgs, tcs.id, sid, e.Seq, id)
	}
	cs.prev.CopyFrom(&st.Clock)
	if st.Tagged {
		w.checkSender(senderKey{cs.id, senderID}, at, in.Topic, id, st)
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
	w.findings = append(w.findings, storedFinding{key: key, Finding: Finding{
		Code: code, Severity: code.Severity(), Topic: topic, Coordinates: coords, Summary: summary, Action: code.Action(), Count: 1,
	}})
}

const (
	recCols   = 14
	recChunk  = 64
	clmChunk  = 256
	seqChunk  = 192
	recInsert = `INSERT INTO records(id, ch, off, ts, kind, stamped, tagged, sender, seq, n_off, n_seq, hdr_bytes, stamp, err) VALUES `
)

// flush writes buffered rows in full chunks, and everything when all is
// set. Multi-row inserts through cached statements keep ingest fast.
func (w *writer) flush(ctx context.Context, tx *sql.Tx, all bool) error {
	var err error
	if w.recArgs, err = w.flushRows(ctx, tx, recInsert, w.recArgs, recCols, recChunk, all); err != nil {
		return err
	}
	if w.clmArgs, err = w.flushRows(ctx, tx, `INSERT OR IGNORE INTO claims(ch, value, rec) VALUES `, w.clmArgs, 3, clmChunk, all); err != nil {
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
	for _, f := range w.findings {
		if _, err := tx.ExecContext(ctx, `INSERT INTO findings(key, code, severity, topic, coords, summary) VALUES(?, ?, ?, ?, ?, ?)
			ON CONFLICT(key) DO UPDATE SET count = count + 1`,
			f.key, string(f.Code), int(f.Severity), f.Topic, strings.Join(f.Coordinates, " "), f.Summary); err != nil {
			return fmt.Errorf("observer: ingest: finding %s: %w", f.Code, err)
		}
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
