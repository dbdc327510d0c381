package observer

import (
	"context"
	"database/sql"
)

// Schema 4 makes a store one shard's view of a group of observers (see
// shard.go), and makes what the rules report independent of the order in
// which records were ingested:
//
//   - channels.assigned: whether this observer reads the channel for its
//     group (always, without a group); channels.owned: whether, in
//     addition, it has read it far enough that its own records are the
//     truth for it — a channel that moved here is read anew first. Data
//     about the channels others own arrives in the remote_* tables;
//   - claims.src: the channel of the claiming records of a block, so a
//     shard judges only the claims its own channels make;
//   - chan_stats names records by offset, not by ingest order, so that
//     statistics can be merged across shards and "the first stamped
//     record" is the same whoever ingested it;
//   - findings.anchor: the channel whose owner records the finding;
//     epoch, which counts how often it was opened (an acknowledgement
//     covers one epoch); hw, the highest offset of its anchor channel
//     counted into it, so a channel read again counts nothing twice;
//   - partials: what one channel's records contribute to a finding about
//     more than one channel, which the anchor's owner adds up;
//   - seqs: the records of each sender by sequence number, in blocks
//     (seqblock.go), instead of an index over every tagged record.
const schema4 = `
ALTER TABLE channels ADD COLUMN assigned INTEGER NOT NULL DEFAULT 1;
ALTER TABLE channels ADD COLUMN owned INTEGER NOT NULL DEFAULT 1;
ALTER TABLE claims ADD COLUMN src INTEGER;
UPDATE claims SET src = (SELECT r.ch FROM records r WHERE r.id = claims.rec);
UPDATE chan_stats SET
	first_stamped = (SELECT r.off FROM records r WHERE r.id = chan_stats.first_stamped),
	first_unstamped = (SELECT r.off FROM records r WHERE r.id = chan_stats.first_unstamped),
	last_stamped = (SELECT r.off FROM records r WHERE r.id = chan_stats.last_stamped);
ALTER TABLE findings ADD COLUMN anchor TEXT NOT NULL DEFAULT '';
ALTER TABLE findings ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE findings ADD COLUMN hw INTEGER NOT NULL DEFAULT -1;
CREATE TABLE partials(
	key TEXT NOT NULL,        -- the finding's key
	src INTEGER NOT NULL,     -- the contributing channel
	code TEXT NOT NULL,
	n INTEGER NOT NULL,       -- how many of its records contribute
	hw INTEGER NOT NULL,      -- the highest offset of src counted in n
	first_off INTEGER NOT NULL, -- its first contributing record
	claimed TEXT NOT NULL,    -- the coordinate that record claims
	why TEXT NOT NULL DEFAULT '',
	bridged INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY(key, src)) WITHOUT ROWID;
CREATE INDEX partials_src ON partials(src);
CREATE TABLE remote_channels(
	ch INTEGER PRIMARY KEY,
	owner TEXT NOT NULL,
	start_off INTEGER NOT NULL,
	next_off INTEGER NOT NULL,
	pruned_below INTEGER NOT NULL,
	tail_off INTEGER NOT NULL,  -- the newest stamped data record; -1: none
	tail BLOB);                 -- its stamp, stored form
CREATE TABLE remote_stats(
	ch INTEGER NOT NULL, bucket INTEGER NOT NULL,
	n_data INTEGER NOT NULL, n_marker INTEGER NOT NULL, n_stamped INTEGER NOT NULL, n_undecodable INTEGER NOT NULL,
	sum_entries INTEGER NOT NULL, max_entries INTEGER NOT NULL, sum_bytes INTEGER NOT NULL, min_ts INTEGER NOT NULL,
	first_stamped INTEGER, first_unstamped INTEGER, last_stamped INTEGER,
	PRIMARY KEY(ch, bucket)) WITHOUT ROWID;
CREATE TABLE remote_holes(ch INTEGER NOT NULL, from_off INTEGER NOT NULL, to_off INTEGER NOT NULL, kind INTEGER NOT NULL,
	PRIMARY KEY(ch, from_off)) WITHOUT ROWID;
CREATE TABLE remote_fine(ch INTEGER PRIMARY KEY, parts BLOB NOT NULL);
CREATE TABLE seqs(ch INTEGER NOT NULL, sender INTEGER NOT NULL, lo INTEGER NOT NULL, first INTEGER NOT NULL,
	hi INTEGER NOT NULL, last INTEGER NOT NULL, last_off INTEGER NOT NULL, pairs BLOB NOT NULL,
	PRIMARY KEY(ch, sender, lo, first)) WITHOUT ROWID;
DROP INDEX IF EXISTS records_seq;
CREATE TABLE members(instance TEXT PRIMARY KEY, url TEXT NOT NULL, at INTEGER NOT NULL);
-- Every fact of the group's state topic as last read, this shard's own
-- included: what it published is what it diffs its next facts against.
CREATE TABLE facts(key TEXT PRIMARY KEY, owner TEXT NOT NULL, value BLOB NOT NULL) WITHOUT ROWID;
CREATE TABLE shard_meta(k TEXT PRIMARY KEY, v TEXT NOT NULL);
-- The statistics every rule reads: a channel's own where this observer
-- owns it, else what its owner published.
CREATE VIEW all_stats AS
	SELECT st.ch, st.bucket, st.n_data, st.n_marker, st.n_stamped, st.n_undecodable, st.sum_entries, st.max_entries,
		st.sum_bytes, st.min_ts, st.first_stamped, st.first_unstamped, st.last_stamped
	FROM chan_stats st JOIN channels c ON c.id = st.ch WHERE c.owned
	UNION ALL
	SELECT rs.ch, rs.bucket, rs.n_data, rs.n_marker, rs.n_stamped, rs.n_undecodable, rs.sum_entries, rs.max_entries,
		rs.sum_bytes, rs.min_ts, rs.first_stamped, rs.first_unstamped, rs.last_stamped
	FROM remote_stats rs JOIN channels c ON c.id = rs.ch WHERE NOT c.owned;
`

// migrate4 brings a schema 3 store to schema 4 in one transaction, keeping
// every record and finding.
func (s *Store) migrate4(ctx context.Context, tx *sql.Tx) error {
	if _, err := tx.ExecContext(ctx, schema4); err != nil {
		return err
	}
	return buildSeqs(ctx, tx)
}
