package observer

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
)

// TestKindSQLSpellings: the SQL literals name the kinds they stand for.
func TestKindSQLSpellings(t *testing.T) {
	for _, tc := range []struct {
		sql  string
		kind recordKind
	}{{sqlKindData, kindData}, {sqlKindControl, kindControl}, {sqlKindAborted, kindAborted}, {sqlKindPending, kindPending}} {
		if tc.sql != strconv.Itoa(int(tc.kind)) {
			t.Errorf("SQL spelling %q stands for kind %d", tc.sql, tc.kind)
		}
	}
}

// TestRecordRowMatchesInsert: a row gives one argument per column the
// insert names.
func TestRecordRowMatchesInsert(t *testing.T) {
	cols := strings.Count(recInsert[strings.Index(recInsert, "("):strings.Index(recInsert, ")")], ",") + 1
	if n := len((&recordRow{}).appendArgs(nil)); n != cols || cols != recCols {
		t.Errorf("recordRow gives %d arguments, the insert names %d columns, recCols is %d", n, cols, recCols)
	}
}

// TestWriterFailsWhenItCannotReload: a batch that fails leaves the writer
// rebuilding its caches from the store; when that fails too, the writer
// refuses every later batch instead of ingesting from caches that may run
// ahead of the store.
func TestWriterFailsWhenItCannotReload(t *testing.T) {
	ctx := context.Background()
	st, w := newTestWriter(t)
	if err := w.ingest(ctx, []incoming{rec(t, 0, 1, nil)}); err != nil {
		t.Fatal(err)
	}
	// Without sender_state, the batch's flush fails, and so does the reload.
	if _, err := st.db.ExecContext(ctx, `ALTER TABLE sender_state RENAME TO sender_state_away`); err != nil {
		t.Fatal(err)
	}
	if err := w.ingest(ctx, []incoming{rec(t, 1, 2, nil)}); err == nil || errors.Is(err, errWriterFailed) {
		t.Fatalf("first failing batch: %v; want the store's error", err)
	}
	if _, err := st.db.ExecContext(ctx, `ALTER TABLE sender_state_away RENAME TO sender_state`); err != nil {
		t.Fatal(err)
	}
	err := w.ingest(ctx, []incoming{rec(t, 1, 2, nil)})
	if !errors.Is(err, errWriterFailed) {
		t.Fatalf("batch after a failed reload: %v; want errWriterFailed", err)
	}
	var n int
	if err := st.db.QueryRowContext(ctx, `SELECT count(*) FROM records`).Scan(&n); err != nil || n != 1 {
		t.Errorf("records stored: %d (%v), want 1", n, err)
	}
}

// TestKeysAreFoundByHash: the store keeps a hash of each record's key,
// finds records by the key an operator types, and adds the column to a
// store written before keys were kept.
func TestKeysAreFoundByHash(t *testing.T) {
	ctx := context.Background()
	st, w := newTestWriter(t)
	a, b := rec(t, 0, 1, nil), rec(t, 1, 2, nil)
	a.Key, b.Key = []byte("cust-42"), []byte("cust-7")
	if err := w.ingest(ctx, []incoming{a, b, rec(t, 2, 3, nil)}); err != nil {
		t.Fatal(err)
	}
	got, err := st.KeyRecords(ctx, "cust-42", 10)
	if err != nil || len(got) != 1 || got[0] != at(0) {
		t.Errorf("records with key cust-42: %v %v, want [%s]", got, err, at(0))
	}
	if got, err := st.KeyRecords(ctx, "cust-", 10); err != nil || len(got) != 0 {
		t.Errorf("records with key cust-: %v %v, want none (keys match whole)", got, err)
	}
	var stored string
	if err := st.db.QueryRowContext(ctx, `SELECT count(*) FROM records WHERE CAST(key_hash AS TEXT) LIKE '%cust%'`).Scan(&stored); err != nil || stored != "0" {
		t.Errorf("a key is stored as text: %s %v", stored, err)
	}

	// A store from before the column: reopening adds it.
	if _, err := st.db.ExecContext(ctx, `ALTER TABLE records DROP COLUMN key_hash`); err != nil {
		t.Fatal(err)
	}
	st.Close()
	st2, err := OpenStore(ctx, st.path)
	if err != nil {
		t.Fatal(err)
	}
	defer st2.Close()
	if got, err := st2.KeyRecords(ctx, "cust-42", 10); err != nil || len(got) != 0 {
		t.Errorf("after adding the column to an old store: %v %v, want none and no error", got, err)
	}
}
