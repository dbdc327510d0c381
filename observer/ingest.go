package observer

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
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
	// assigned: this observer reads the channel; owned: and has read it
	// up to its target (writer.targets), so its records are the truth for
	// the channel (see migrate.go).
	assigned, owned bool
	// prevOffs and prevSeqs are the entries of the clock of the channel's
	// last data record (empty when it was unstamped or undecodable), in
	// clock order. A claim the previous record already made is not
	// indexed again: a run of records carrying the same claim is indexed
	// by its first record, and Descendants extends the run by reading
	// forward. It keeps the claim index near the number of claims that
	// change, not the stamp width.
	prevOffs []headers.OffsetEntry
	prevSeqs []headers.SeqEntry
}

// writer turns fetched records into store rows and per-record findings. It
// is the store's only writer and is not safe for concurrent use.
type writer struct {
	st      *Store
	chans   map[headers.Channel]*chanState
	senders map[headers.SenderID]int64
	state   map[senderKey]*senderState
	nextRec int64
	stamp   headers.Stamp
	rows    []recordRow // the batch's records rows, written at its end
	// pending are the batch's rows of open transactions, by producer and
	// channel (indexes into rows); pendStored the open transactions with
	// rows written by earlier batches.
	pending    map[pendKey][]int
	pendStored map[pendKey]int64 // the lowest offset written pending
	// touched is what the batch changed, for a shard to publish (shard.go).
	touched touched
	// targets are the log ends the channels assigned to a shard had when
	// they were assigned: each is owned once read that far.
	targets map[headers.Channel]int64
	recArgs []any // their insert arguments, reused
	clmArgs []any
	blocks  map[blockKey]*claimBlock // a batch's open blocks of offset claims
	closed  []*claimBlock            // and its full ones
	// seqBlocks and seqClosed are the same for the sequence index
	// (seqblock.go).
	seqBlocks map[senderKey]*seqBlock
	seqClosed []*seqBlock
	agg       map[statsKey]*stats
	seqArgs   []any
	// seqIdxArgs are the rows of the sequence index, reused.
	seqIdxArgs []any
	c          *wconn
	findings   []Finding
	// arena holds a batch's stored stamps back to back: one allocation
	// for many records, reset when the batch begins. keep hands out its
	// tail.
	arena   []byte
	compact compactBuf
	offs    []headers.OffsetEntry // the record's stamp's entries, in clock order
	seqs    []headers.SeqEntry
	// uncommitted: records of open and aborted transactions are fetched.
	uncommitted bool
	place       placement // partition counts for checkPlacement (placement.go)
	// partials are the contributions counted at ingest (partials.go).
	partials map[partialKey]*partial
	// sharded: the observer shares the topics with a group; a channel is
	// owned only once assigned.
	sharded bool
	// failNext, set by a test, fails the next batch as a store error would.
	failNext error
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

func setFirst(v *sql.NullInt64, off int64) {
	if !v.Valid {
		*v = sql.NullInt64{Int64: off, Valid: true}
	}
}

func newWriter(ctx context.Context, st *Store) (*writer, error) {
	conn, err := st.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("observer: store writer: %w", err)
	}
	w := &writer{st: st, c: &wconn{conn: conn, stmts: map[string]*sql.Stmt{}, driverStmts: map[string]driver.Stmt{}}, agg: map[statsKey]*stats{}, blocks: map[blockKey]*claimBlock{},
		seqBlocks: map[senderKey]*seqBlock{}, pending: map[pendKey][]int{}, touched: newTouched(), targets: map[headers.Channel]int64{}}
	if err := w.load(ctx); err != nil {
		w.c.close()
		return nil, err
	}
	return w, nil
}

// wconn is the writer's own connection. It begins and ends its
// transactions itself (BEGIN IMMEDIATE, COMMIT), so the statements it
// prepares once run on it as they are: a *sql.Tx would prepare a
// statement of a *sql.Conn again for every transaction.
type wconn struct {
	conn  *sql.Conn
	stmts map[string]*sql.Stmt
	// The bulk inserts bypass database/sql, which converted and copied
	// every value of a thousand-row batch again (execDriver).
	driverStmts map[string]driver.Stmt
	values      []driver.NamedValue
}

func (c *wconn) prepared(ctx context.Context, q string) (*sql.Stmt, error) {
	if st, ok := c.stmts[q]; ok {
		return st, nil
	}
	st, err := c.conn.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	c.stmts[q] = st
	return st, nil
}

// ExecContext runs q, prepared once, with args.
func (c *wconn) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	st, err := c.prepared(ctx, q)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(ctx, args...)
}

// QueryRowContext runs q, prepared once, with args.
func (c *wconn) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	st, err := c.prepared(ctx, q)
	if err != nil {
		return c.conn.QueryRowContext(ctx, q, args...) // carries the error
	}
	return st.QueryRowContext(ctx, args...)
}

// begin takes the store's write lock at once, waiting for another writer
// (an acknowledgement, a prune) rather than failing later on a stale
// snapshot.
func (c *wconn) begin(ctx context.Context) error {
	_, err := c.conn.ExecContext(ctx, "BEGIN IMMEDIATE")
	return err
}

func (c *wconn) commit(ctx context.Context) error {
	if _, err := c.conn.ExecContext(ctx, "COMMIT"); err != nil {
		c.rollback()
		return err
	}
	return nil
}

// rollback ends a failed transaction, even once ctx has ended.
func (c *wconn) rollback() {
	c.conn.ExecContext(context.Background(), "ROLLBACK")
}

// execDriver runs q, prepared once on the connection's driver, with
// args, each already a value the driver binds (int64, bool, []byte,
// string or nil).
func (c *wconn) execDriver(ctx context.Context, q string, args []any) error {
	return c.conn.Raw(func(dc any) error {
		st, ok := c.driverStmts[q]
		if !ok {
			p, ok := dc.(driver.ConnPrepareContext)
			if !ok {
				return fmt.Errorf("observer: the SQLite driver cannot prepare statements")
			}
			var err error
			if st, err = p.PrepareContext(ctx, q); err != nil {
				return err
			}
			c.driverStmts[q] = st
		}
		ex, ok := st.(driver.StmtExecContext)
		if !ok {
			return fmt.Errorf("observer: the SQLite driver cannot execute statements")
		}
		c.values = c.values[:0]
		for i, a := range args {
			c.values = append(c.values, driver.NamedValue{Ordinal: i + 1, Value: a})
		}
		_, err := ex.ExecContext(ctx, c.values)
		return err
	})
}

func (c *wconn) close() {
	for _, st := range c.stmts {
		st.Close()
	}
	c.conn.Raw(func(any) error {
		for _, st := range c.driverStmts {
			st.Close()
		}
		return nil
	})
	c.conn.Close()
}

// load rebuilds the in-memory caches from the store, at start and after a
// failed batch so memory never runs ahead of what was committed.
func (w *writer) load(ctx context.Context) error {
	w.chans = make(map[headers.Channel]*chanState)
	w.senders = make(map[headers.SenderID]int64)
	w.state = make(map[senderKey]*senderState)
	db := w.st.db
	rows, err := db.QueryContext(ctx, `SELECT id, topic, part, name, start_off, next_off, assigned, owned FROM channels`)
	if err != nil {
		return fmt.Errorf("observer: load channels: %w", err)
	}
	for rows.Next() {
		cs := new(chanState)
		var topic []byte
		if err := rows.Scan(&cs.id, &topic, &cs.ch.Partition, &cs.name, &cs.start, &cs.next, &cs.assigned, &cs.owned); err != nil {
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
		var st headers.Stamp
		if readStoredStamp(&st, stamp) == nil {
			s.clock.CopyFrom(&st.Clock)
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
			var st headers.Stamp
			if readStoredStamp(&st, stamp) == nil {
				cs.prevOffs = st.Clock.AppendOffsetEntries(cs.prevOffs[:0])
				cs.prevSeqs = st.Clock.AppendSeqEntries(cs.prevSeqs[:0])
			}
		}
	}
	rows.Close()
	if err := w.loadPartials(ctx); err != nil {
		return err
	}
	w.pendStored = map[pendKey]int64{}
	rows, err = db.QueryContext(ctx, `SELECT ch, pid, min(off) FROM records WHERE kind = `+sqlKindPending+` GROUP BY ch, pid`)
	if err != nil {
		return fmt.Errorf("observer: load open transactions: %w", err)
	}
	for rows.Next() {
		var k pendKey
		var first int64
		if err := rows.Scan(&k.ch, &k.pid, &first); err != nil {
			rows.Close()
			return fmt.Errorf("observer: load open transactions: %w", err)
		}
		w.pendStored[k] = first
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
func (w *writer) channel(ctx context.Context, ch headers.Channel, name string) (*chanState, error) {
	if cs, ok := w.chans[ch]; ok {
		if cs.name == "" && name != "" {
			cs.name, cs.dirty = name, true
		}
		return cs, nil
	}
	// A shard's group state adds channels too (facts.go): the row may be
	// there already.
	if _, err := w.c.ExecContext(ctx, `INSERT OR IGNORE INTO channels(topic, part, name, owned, assigned) VALUES(?, ?, ?, ?, ?)`,
		ch.Topic[:], ch.Partition, name, !w.sharded, !w.sharded); err != nil {
		return nil, fmt.Errorf("observer: add channel %s: %w", ch, err)
	}
	cs := &chanState{ch: ch}
	if err := w.c.QueryRowContext(ctx, `SELECT id, name, start_off, next_off, assigned, owned FROM channels WHERE topic = ? AND part = ?`,
		ch.Topic[:], ch.Partition).Scan(&cs.id, &cs.name, &cs.start, &cs.next, &cs.assigned, &cs.owned); err != nil {
		return nil, fmt.Errorf("observer: add channel %s: %w", ch, err)
	}
	if cs.name == "" && name != "" {
		cs.name, cs.dirty = name, true
	}
	w.chans[ch] = cs
	return cs, nil
}

func (w *writer) sender(ctx context.Context, s headers.SenderID) (int64, error) {
	if id, ok := w.senders[s]; ok {
		return id, nil
	}
	res, err := w.c.ExecContext(ctx, `INSERT INTO senders(sender) VALUES(?)`, s[:])
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
	if err := w.c.begin(ctx); err != nil {
		return fmt.Errorf("observer: mark %s consumed: %w", ch, err)
	}
	defer func() {
		if err != nil {
			w.c.rollback()
			w.reload(ctx) // the channel row may be in memory but not in the store
		}
	}()
	cs, err := w.channel(ctx, ch, name)
	if err != nil {
		return err
	}
	if cs.start < 0 {
		cs.start, cs.next, cs.dirty = start, start, true
	}
	if err := w.flushChannels(ctx); err != nil {
		return err
	}
	if err := w.c.commit(ctx); err != nil {
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
	if w.failNext != nil {
		err, w.failNext = w.failNext, nil
		return err
	}
	if err := w.c.begin(ctx); err != nil {
		return fmt.Errorf("observer: ingest: %w", err)
	}
	// The rows of the previous batch are written: their stamps' bytes may
	// be overwritten. (A slice the arena outgrew keeps its old array.)
	w.arena = w.arena[:0]
	defer func() {
		if err != nil {
			w.c.rollback()
			w.rows, w.clmArgs, w.seqArgs, w.findings, w.closed = w.rows[:0], w.clmArgs[:0], w.seqArgs[:0], w.findings[:0], w.closed[:0]
			clear(w.agg)
			clear(w.pending)
			clear(w.blocks)
			clear(w.seqBlocks)
			w.seqClosed = w.seqClosed[:0]
			w.reload(ctx)
		}
	}()
	for i := range batch {
		if err := w.add(ctx, &batch[i]); err != nil {
			return err
		}
	}
	if err := w.flush(ctx, true); err != nil {
		return err
	}
	if err := w.c.commit(ctx); err != nil {
		return fmt.Errorf("observer: ingest: commit: %w", err)
	}
	return nil
}

// keep returns the bytes b appended to the arena, capped so that a later
// append cannot write into them, and makes them part of the arena.
func (w *writer) keep(b []byte) []byte {
	n := len(w.arena)
	w.arena = b
	return b[n:len(b):len(b)]
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
	// Every value is of a type the driver binds directly (driverValues).
	return append(args, r.id, r.ch, r.off, r.ts, int64(r.kind), r.stamped, r.tagged, r.sender, r.seq,
		int64(r.nOff), int64(r.nSeq), int64(r.hdrBytes), stamp, errText, r.pid, key)
}

// add stores one record: it moves the channel's position, notes skipped
// offsets, and hands the record to the method for its kind.
func (w *writer) add(ctx context.Context, in *incoming) error {
	cs, err := w.channel(ctx, in.Channel, in.Topic)
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
		if _, err := w.c.ExecContext(ctx, `INSERT OR IGNORE INTO gaps(ch, from_off, to_off) VALUES(?, ?, ?)`, cs.id, cs.next, in.Offset); err != nil {
			return fmt.Errorf("observer: ingest: gap %d..%d on %s: %w", cs.next, in.Offset, in.Channel, err)
		}
		w.touched.holes(cs.id, cs.next, cs.next)
	}
	cs.next, cs.dirty = in.Offset+1, true
	w.touched.chans[cs.id] = true
	row := recordRow{id: w.nextRec, ch: cs.id, off: in.Offset, ts: in.Timestamp, kind: kindData, pid: -1}
	if len(in.Key) > 0 {
		row.keyHash = keyHash(in.Key)
	}
	w.nextRec++
	if in.Control {
		return w.addMarker(ctx, cs, in, row)
	}
	if in.Transactional {
		row.kind, row.pid = kindPending, in.ProducerID
	}
	var flags byte
	for _, h := range in.Headers {
		switch h.Key {
		case headers.HeaderVC:
			flags |= compactVC
		case headers.HeaderCauses:
			flags |= compactCauses
		case headers.HeaderVCSender, headers.HeaderVCSeq:
		default:
			continue
		}
		row.stamped = true
		row.hdrBytes += len(h.Key) + len(h.Value)
	}
	if derr := headers.ReadStamp(&w.stamp, in.Headers); derr != nil {
		row.stamp = w.keep(encodeStampHeaders(w.arena, in.Headers))
		return w.addUndecodable(ctx, cs, in, row, derr)
	}
	// The entries once, in clock order, for the stored stamp and the
	// claim index.
	w.offs = w.stamp.Clock.AppendOffsetEntries(w.offs[:0])
	w.seqs = w.stamp.Clock.AppendSeqEntries(w.seqs[:0])
	if row.stamped {
		b, ok := w.compact.appendCompactStamp(w.arena, &w.stamp, w.offs, w.seqs, flags)
		if !ok {
			b = encodeStampHeaders(w.arena, in.Headers)
		}
		row.stamp = w.keep(b)
	}
	return w.addData(ctx, cs, in, row, &w.stamp)
}

// addMarker stores a transaction marker and settles its producer's open
// records on the channel: committed or aborted.
func (w *writer) addMarker(ctx context.Context, cs *chanState, in *incoming, row recordRow) error {
	w.stats(cs.id, in.Offset, in.Timestamp).marker++
	row.kind, row.pid = kindControl, in.ProducerID
	w.appendRow(row)
	kind := kindAborted
	if in.Commit {
		kind = kindData
	}
	// The batch's rows are written at its end: settle those in memory, and
	// those an earlier batch wrote through the index of pending records.
	k := pendKey{cs.id, in.ProducerID}
	for _, i := range w.pending[k] {
		w.rows[i].kind = kind
		if kind == kindAborted {
			w.touched.holes(cs.id, w.rows[i].off, w.rows[i].off)
		}
	}
	delete(w.pending, k)
	if first, ok := w.pendStored[k]; ok {
		if _, err := w.c.ExecContext(ctx, `UPDATE records SET kind = ? WHERE ch = ? AND pid = ? AND kind = `+sqlKindPending, kind, cs.id, in.ProducerID); err != nil {
			return fmt.Errorf("observer: ingest: settle transaction of producer %d on %s: %w", in.ProducerID, in.Channel, err)
		}
		delete(w.pendStored, k)
		if kind == kindAborted {
			w.touched.holes(cs.id, first, in.Offset)
		}
	}
	w.touched.holes(cs.id, in.Offset, in.Offset)
	return nil
}

// pendKey names the open transaction of a producer on a channel.
type pendKey struct{ ch, pid int64 }

// appendRow buffers a records row until the batch ends, noting a pending
// one so that its marker can settle it in memory.
func (w *writer) appendRow(row recordRow) {
	if row.kind == kindPending {
		k := pendKey{row.ch, row.pid}
		w.pending[k] = append(w.pending[k], len(w.rows))
	}
	w.rows = append(w.rows, row)
}

// addUndecodable stores a record whose stamp headers do not decode, with
// its finding.
func (w *writer) addUndecodable(ctx context.Context, cs *chanState, in *incoming, row recordRow, derr error) error {
	at := headers.Coordinate{Channel: in.Channel, Offset: in.Offset}
	row.stamped, row.err = true, derr.Error()
	w.appendRow(row)
	cs.prevOffs, cs.prevSeqs = cs.prevOffs[:0], cs.prevSeqs[:0]
	agg := w.stats(cs.id, in.Offset, in.Timestamp)
	agg.data++
	agg.undecodable++
	w.finding(CodeUndecodableStamp, "undecodable-stamp|"+at.String(), in.Topic,
		fmt.Sprintf("record %s of topic %q: %v", at, in.Topic, derr), at.String())
	return w.flush(ctx, false)
}

// addData stores a data record (stamped or not), indexes the claims its
// stamp adds to its channel's previous record, and checks its sender.
func (w *writer) addData(ctx context.Context, cs *chanState, in *incoming, row recordRow, st *headers.Stamp) error {
	at := headers.Coordinate{Channel: in.Channel, Offset: in.Offset}
	var err error
	if st.Tagged {
		if row.sender, err = w.sender(ctx, st.Sender); err != nil {
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
		setFirst(&agg.firstStamped, in.Offset)
		agg.lastStamped = sql.NullInt64{Int64: in.Offset, Valid: true}
	} else {
		setFirst(&agg.firstUnstamped, in.Offset)
	}
	row.tagged, row.seq, row.nOff, row.nSeq = st.Tagged, st.Seq, st.Clock.NumOffsets(), st.Clock.NumSeqs()
	w.appendRow(row)
	if st.Tagged {
		w.sequence(cs.id, row.sender, st.Seq, in.Offset, row.id)
	}
	prev := cs.prevOffs
	for _, e := range w.offs {
		if e.Channel == in.Channel && e.Offset >= in.Offset {
			// Decidable from the record alone: no position at or above its
			// own was assigned when it was sent (the naive log-end stamp).
			claimed := headers.Coordinate{Channel: e.Channel, Offset: e.Offset}
			w.finding(CodeUnsettleableClaim, "unsettleable-claim|self|"+at.String(), in.Topic,
				fmt.Sprintf("record %s (topic %q) claims %s on its own channel, at or past its own position: a position not assigned when it was sent",
					at, in.Topic, claimed), at.String(), claimed.String())
		}
		// Both lists are in clock order: walk the previous one alongside
		// (mostly the same channels, so equal ones are not ordered).
		for len(prev) > 0 && prev[0].Channel != e.Channel && chanOrder(prev[0].Channel, e.Channel) < 0 {
			prev = prev[1:]
		}
		if len(prev) > 0 && prev[0] == e {
			continue
		}
		tcs, err := w.channel(ctx, e.Channel, "")
		if err != nil {
			return err
		}
		w.claim(cs.id, tcs.id, e.Offset, row.id)
	}
	prevSeqs := cs.prevSeqs
	for _, e := range w.seqs {
		for len(prevSeqs) > 0 && (prevSeqs[0].Channel != e.Channel || prevSeqs[0].Sender != e.Sender) && seqOrder(prevSeqs[0], e) < 0 {
			prevSeqs = prevSeqs[1:]
		}
		if len(prevSeqs) > 0 && prevSeqs[0] == e {
			continue
		}
		tcs, err := w.channel(ctx, e.Channel, "")
		if err != nil {
			return err
		}
		sid, err := w.sender(ctx, e.Sender)
		if err != nil {
			return err
		}
		w.seqArgs = append(w.seqArgs, tcs.id, sid, e.Seq, row.id)
	}
	cs.prevOffs = append(cs.prevOffs[:0], w.offs...)
	cs.prevSeqs = append(cs.prevSeqs[:0], w.seqs...)
	w.checkPlacement(in, st)
	// Reading uncommitted, a stage's aborted sends show up and their
	// sequence numbers are reused by the redo: judge senders only on
	// records known to be committed.
	if st.Tagged && !(in.Transactional && w.uncommitted) {
		w.checkSender(senderKey{cs.id, row.sender}, at, in.Topic, row.id, st)
	}
	return w.flush(ctx, false)
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

// flushRecords writes the batch's record rows. They wait for the end of
// the batch so that a marker arriving in the same batch settles its
// transaction's rows before they are written.
func (w *writer) flushRecords(ctx context.Context) error {
	w.recArgs = w.recArgs[:0]
	for i := range w.rows {
		w.recArgs = w.rows[i].appendArgs(w.recArgs)
	}
	for k, rows := range w.pending {
		// Written pending: its marker settles it in the store.
		if first, ok := w.pendStored[k]; !ok || w.rows[rows[0]].off < first {
			w.pendStored[k] = w.rows[rows[0]].off
		}
	}
	clear(w.pending)
	w.rows = w.rows[:0]
	var err error
	w.recArgs, err = w.flushRows(ctx, recInsert, w.recArgs, recCols, recChunk, true)
	return err
}

// flush writes buffered rows in full chunks, and everything when all is
// set. Multi-row inserts through cached statements keep ingest fast.
func (w *writer) flush(ctx context.Context, all bool) error {
	if all {
		if err := w.flushRecords(ctx); err != nil {
			return err
		}
	}
	var err error
	if all {
		w.clmArgs = w.blockArgs(w.clmArgs)
	}
	if w.clmArgs, err = w.flushRows(ctx, `INSERT INTO claims(ch, lo, rec, hi, last, pairs, src) VALUES `, w.clmArgs, 7, clmChunk, all); err != nil {
		return err
	}
	if w.seqArgs, err = w.flushRows(ctx, `INSERT OR IGNORE INTO seq_claims(ch, sender, value, rec) VALUES `, w.seqArgs, 4, seqChunk, all); err != nil {
		return err
	}
	if !all {
		return nil
	}
	if w.seqIdxArgs, err = w.flushRows(ctx, seqInsert, w.seqBlockArgs(w.seqIdxArgs), seqCols, clmChunk, true); err != nil {
		return err
	}
	for k, s := range w.state {
		if !s.dirty {
			continue
		}
		if _, err := w.c.ExecContext(ctx, `INSERT INTO sender_state(ch, sender, last_seq, last_rec) VALUES(?, ?, ?, ?)
			ON CONFLICT(ch, sender) DO UPDATE SET last_seq = excluded.last_seq, last_rec = excluded.last_rec`,
			k.ch, k.sender, s.lastSeq, s.lastRec); err != nil {
			return fmt.Errorf("observer: ingest: sender state: %w", err)
		}
		s.dirty = false
	}
	if err := w.flushChannels(ctx); err != nil {
		return err
	}
	for k, a := range w.agg {
		if _, err := w.c.ExecContext(ctx, `INSERT INTO chan_stats(ch, bucket, n_data, n_marker, n_stamped, n_undecodable,
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
	for k := range w.agg {
		w.touched.buckets[k] = true
	}
	clear(w.agg)
	if err := w.flushPartials(ctx); err != nil {
		return err
	}
	if err := w.storeIngestFindings(ctx, w.findings); err != nil {
		return err
	}
	w.findings = w.findings[:0]
	return nil
}

func (w *writer) flushChannels(ctx context.Context) error {
	for _, cs := range w.chans {
		if !cs.dirty {
			continue
		}
		if _, err := w.c.ExecContext(ctx, `UPDATE channels SET name = ?, start_off = ?, next_off = ? WHERE id = ?`,
			cs.name, cs.start, cs.next, cs.id); err != nil {
			return fmt.Errorf("observer: ingest: position of %s: %w", cs.ch, err)
		}
		cs.dirty = false
	}
	return nil
}

// flushRows inserts args, rows of cols values, chunk rows per statement
// while a full chunk is buffered; with all, the rest too, in chunks of
// halving size, so every statement is one of a few prepared once.
func (w *writer) flushRows(ctx context.Context, prefix string, args []any, cols, chunk int, all bool) ([]any, error) {
	done := 0
	for rows := chunk; rows >= 1; rows /= 2 {
		per := cols * rows
		for len(args)-done >= per {
			if err := w.c.execDriver(ctx, prefix+placeholders(rows, cols), args[done:done+per]); err != nil {
				return args, fmt.Errorf("observer: ingest: %w", err)
			}
			done += per
		}
		if !all {
			break
		}
	}
	return append(args[:0], args[done:]...), nil
}

func (w *writer) close() { w.c.close() }

// storeIngestFindings records findings detected at ingest: a new key is a
// new open finding; a repeat adds to its count, and a repeat of a finding
// that had resolved reopens it, with the new records, unacknowledged. A
// finding is anchored at the channel of the record it is about, and a
// record at or below the highest offset counted into it is one read again
// (its channel moved here from another shard, or was read anew), which
// counts nothing.
func (w *writer) storeIngestFindings(ctx context.Context, fs []Finding) error {
	now := time.Now().UnixMilli()
	for _, f := range fs {
		coords := strings.Join(f.Coordinates, " ")
		ref, err := ParseRef(f.Coordinates[0])
		if err != nil || !ref.ByID {
			return fmt.Errorf("observer: ingest: finding %s names %q: %w", f.Code, f.Coordinates[0], ErrBadCoordinate)
		}
		anchor := headers.Channel{Topic: ref.ID, Partition: ref.Partition}.String()
		var id, hw int64
		var resolved bool
		err = w.c.QueryRowContext(ctx, `SELECT id, resolved_at IS NOT NULL, hw FROM findings WHERE key = ?`, f.Key).Scan(&id, &resolved, &hw)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			_, err = w.c.ExecContext(ctx, `INSERT INTO findings(id, key, code, severity, topic, coords, summary, first_seen, last_seen, anchor, hw, epoch)
				VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 1)`,
				w.st.newFindingID(f.Key), f.Key, string(f.Code), int(f.Severity), f.Topic, coords, f.Summary, now, now, anchor, ref.Offset)
		case err != nil:
		case ref.Offset <= hw:
			continue // counted when the record was first read
		case resolved:
			_, err = w.c.ExecContext(ctx, `UPDATE findings SET count = count + 1, last_seen = ?, coords = ?, summary = ?, hw = ?, epoch = epoch + 1,
				resolved_at = NULL, resolved_why = '', ack_at = NULL, ack_by = '', ack_reason = '' WHERE id = ?`, now, coords, f.Summary, ref.Offset, id)
			if err == nil {
				err = addEvent(ctx, w.c, id, now, "reopened", "", "seen again: "+f.Coordinates[0])
			}
		default:
			_, err = w.c.ExecContext(ctx, `UPDATE findings SET count = count + 1, last_seen = ?, hw = ? WHERE id = ?`, now, ref.Offset, id)
		}
		if err != nil {
			return fmt.Errorf("observer: ingest: finding %s: %w", f.Code, err)
		}
	}
	return nil
}
