package observer

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
)

// TestMigrateSchema2: a store written by schema 2 — its tables, a record,
// its statistics, a claim and a finding — opens read-only with an error
// saying how to migrate, and writable as the current schema with every
// row kept and the finding open: statistics name records by offset (schema
// 4), claims their claiming channel.
func TestMigrateSchema2(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v2.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	// schema is schema 2's DDL: schema 3 adds to it in migrate3.
	for _, q := range []string{schema,
		`INSERT INTO meta(k, v) VALUES('schema', '2')`,
		`INSERT INTO channels(id, topic, part, name, start_off, next_off) VALUES(1, x'00112233445566778899aabbccddeeff', 0, 'gap', 0, 3)`,
		`INSERT INTO records(id, ch, off, ts, kind, stamped, tagged, sender, seq, n_off, n_seq, hdr_bytes) VALUES(7, 1, 2, 1000, 0, 1, 1, 0, 4, 0, 0, 20)`,
		`INSERT INTO chan_stats(ch, bucket, n_data, n_marker, n_stamped, n_undecodable, sum_entries, max_entries, sum_bytes, min_ts, first_stamped, last_stamped)
			VALUES(1, 0, 1, 0, 1, 0, 0, 0, 20, 1000, 7, 7)`,
		`INSERT INTO claims(ch, lo, rec, hi, last, pairs) VALUES(2, 5, 7, 5, 7, x'0007')`,
		`INSERT INTO findings(key, code, severity, topic, coords, summary, count) VALUES('sequence-gap|x', 'sequence-gap', 3, 'gap', '00112233-4455-6677-8899-aabbccddeeff/0@2', 'skipped 3', 2)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	if _, err := OpenStoreReadOnly(ctx, path); !errors.Is(err, ErrSchemaVersion) {
		t.Errorf("read-only open of a schema 2 store: %v, want ErrSchemaVersion", err)
	}
	st, err := OpenStore(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	var v string
	var records int
	st.db.QueryRowContext(ctx, `SELECT v FROM meta WHERE k = 'schema'`).Scan(&v)
	st.db.QueryRowContext(ctx, `SELECT count(*) FROM records`).Scan(&records)
	if v != schemaVersion || records != 1 {
		t.Errorf("after migration: schema %q, %d records; want %q, 1", v, records, schemaVersion)
	}
	var first, last, src int64
	st.db.QueryRowContext(ctx, `SELECT first_stamped, last_stamped FROM chan_stats`).Scan(&first, &last)
	st.db.QueryRowContext(ctx, `SELECT src FROM claims`).Scan(&src)
	if first != 2 || last != 2 || src != 1 {
		t.Errorf("after migration: statistics name offsets %d..%d, the claim's channel is %d; want 2..2 and 1", first, last, src)
	}
	fs, err := st.Findings(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 || fs[0].State != StateOpen || fs[0].Count != 2 || fs[0].FirstSeen.Year() < 2000 || fs[0].Summary != "skipped 3" {
		t.Fatalf("migrated findings: %+v", fs)
	}
	if _, err := st.Acknowledge(ctx, fs[0].ID, "ops", "migrated"); err != nil {
		t.Errorf("acknowledge a migrated finding: %v", err)
	}
	st.Close()
	// Opening again changes nothing; read-only now opens.
	st, err = OpenStore(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	ro, err := OpenStoreReadOnly(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	fs, err = ro.Findings(ctx, nil)
	if err != nil || len(fs) != 1 || fs[0].State != StateAcknowledged {
		t.Errorf("read-only after migration: %+v %v", fs, err)
	}
}
