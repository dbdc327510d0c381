package observer

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parsley-go/parsley/headers"
)

var (
	chA    = headers.Channel{Topic: headers.TopicID{0xa}, Partition: 0}
	chB    = headers.Channel{Topic: headers.TopicID{0xb}, Partition: 0}
	chC    = headers.Channel{Topic: headers.TopicID{0xc}, Partition: 1}
	sender = headers.SenderID{0x5}
)

func newTestWriter(t *testing.T) (*Store, *writer) {
	t.Helper()
	st, err := OpenStore(context.Background(), filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w, err := newWriter(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.close)
	return st, w
}

// rec builds a tagged record on chA at off with sequence seq and offset
// claims given as channel → offset.
func rec(t *testing.T, off, seq int64, claims map[headers.Channel]int64) incoming {
	st := headers.Stamp{Tagged: seq > 0, Sender: sender, Seq: seq}
	for ch, v := range claims {
		st.Clock.SetOffset(ch, v)
	}
	hs, err := headers.AppendStamp([]headers.Header(nil), &st, headers.DialectVC)
	if err != nil {
		t.Fatal(err)
	}
	return incoming{Channel: chA, Topic: "a", Offset: off, Timestamp: off, Headers: hs}
}

func codesOf(t *testing.T, st *Store) []string {
	t.Helper()
	fs, err := st.Findings(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, f := range fs {
		out = append(out, string(f.Code)+" "+strings.Join(f.Coordinates, " "))
	}
	return out
}

func at(off int64) string { return headers.Coordinate{Channel: chA, Offset: off}.String() }

// TestSenderChecks pins what counts as a gap or a regression, and what
// does not: an entry that disappears (truncation, rescope) is not a
// regression, nor is a claim that only grows.
func TestSenderChecks(t *testing.T) {
	for _, tc := range []struct {
		name string
		recs func(t *testing.T) []incoming
		want []string
	}{
		{"next sequence, growing claims", func(t *testing.T) []incoming {
			return []incoming{rec(t, 0, 1, map[headers.Channel]int64{chB: 3}), rec(t, 1, 2, map[headers.Channel]int64{chB: 4, chC: 0})}
		}, nil},
		{"dropped entry is truncation", func(t *testing.T) []incoming {
			return []incoming{rec(t, 0, 1, map[headers.Channel]int64{chB: 3, chC: 9}), rec(t, 1, 2, map[headers.Channel]int64{chB: 3})}
		}, nil},
		{"gap", func(t *testing.T) []incoming {
			return []incoming{rec(t, 0, 1, nil), rec(t, 1, 2, nil), rec(t, 2, 5, nil)}
		}, []string{"sequence-gap " + at(2) + " " + at(1)}},
		{"sequence goes back", func(t *testing.T) []incoming {
			return []incoming{rec(t, 0, 7, nil), rec(t, 1, 3, nil)}
		}, []string{"stamp-regression " + at(1) + " " + at(0)}},
		{"sequence repeats", func(t *testing.T) []incoming {
			return []incoming{rec(t, 0, 7, nil), rec(t, 1, 7, nil)}
		}, []string{"stamp-regression " + at(1) + " " + at(0)}},
		{"claim shrinks", func(t *testing.T) []incoming {
			return []incoming{rec(t, 0, 1, map[headers.Channel]int64{chB: 3, chC: 9}), rec(t, 1, 2, map[headers.Channel]int64{chB: 3, chC: 8})}
		}, []string{"stamp-regression " + at(1) + " " + at(0)}},
		{"claim on its own position", func(t *testing.T) []incoming {
			return []incoming{rec(t, 0, 0, nil), rec(t, 1, 0, map[headers.Channel]int64{chA: 1})}
		}, []string{"unsettleable-claim " + at(1) + " " + at(1)}},
		{"claim on its own predecessor", func(t *testing.T) []incoming {
			return []incoming{rec(t, 0, 0, nil), rec(t, 1, 0, map[headers.Channel]int64{chA: 0})}
		}, nil},
		{"untagged records are not judged", func(t *testing.T) []incoming {
			return []incoming{rec(t, 0, 0, map[headers.Channel]int64{chB: 3}), rec(t, 1, 0, map[headers.Channel]int64{chB: 1})}
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, w := newTestWriter(t)
			if err := w.ingest(context.Background(), tc.recs(t)); err != nil {
				t.Fatal(err)
			}
			if got := codesOf(t, st); !slices.Equal(got, tc.want) {
				t.Errorf("findings %q, want %q", got, tc.want)
			}
		})
	}
}

// TestUndecodableStamps: every way a stamp can be malformed is stored as
// an undecodable-stamp finding naming the record; nothing panics and
// nothing reads as absent.
func TestUndecodableStamps(t *testing.T) {
	vc, _ := headers.EncodeVC(&headers.Clock{})
	bad := [][]headers.Header{
		{{Key: headers.HeaderVC, Value: []byte{9}}},
		{{Key: headers.HeaderVC, Value: nil}},
		{{Key: headers.HeaderVC, Value: vc}, {Key: headers.HeaderVC, Value: vc}},
		{{Key: headers.HeaderVCSender, Value: make([]byte, 16)}},
		{{Key: headers.HeaderVCSeq, Value: make([]byte, 8)}},
		{{Key: headers.HeaderVCSender, Value: make([]byte, 3)}, {Key: headers.HeaderVCSeq, Value: make([]byte, 8)}},
		{{Key: headers.HeaderCauses, Value: []byte{1, 1}}},
		{{Key: headers.HeaderCauses, Value: []byte{2, 0}}},
	}
	st, w := newTestWriter(t)
	var batch []incoming
	var want []string
	for i, hs := range bad {
		batch = append(batch, incoming{Channel: chA, Topic: "a", Offset: int64(i), Headers: hs})
		want = append(want, "undecodable-stamp "+at(int64(i)))
	}
	if err := w.ingest(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	got := codesOf(t, st)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("findings %q, want %q", got, want)
	}
	r, err := st.Record(context.Background(), headers.Coordinate{Channel: chA, Offset: 2})
	if err != nil {
		t.Fatal(err)
	}
	if r.Err == "" || len(r.Headers) != 2 {
		t.Errorf("record with a duplicated vc header: err %q, %d headers kept; want the error and both headers verbatim", r.Err, len(r.Headers))
	}
	if _, err := r.Stamp(); !errors.Is(err, headers.ErrUndecodable) {
		t.Errorf("Stamp() of the stored record: %v, want ErrUndecodable", err)
	}
}

// TestPruneKeepsFindingsAndAvoidsFalseClaims: pruning drops old records
// and their claims but keeps findings detected at ingest, and a claim on a
// pruned record is not mistaken for a claim on an aborted one.
func TestPruneKeepsFindingsAndAvoidsFalseClaims(t *testing.T) {
	ctx := context.Background()
	st, w := newTestWriter(t)
	if err := w.markConsumed(ctx, chB, "b", 0); err != nil {
		t.Fatal(err)
	}
	var batch []incoming
	for i := range 10 {
		batch = append(batch, incoming{Channel: chB, Topic: "b", Offset: int64(i), Timestamp: int64(i)})
	}
	batch = append(batch, rec(t, 0, 1, nil), rec(t, 1, 3, map[headers.Channel]int64{chB: 2}))
	if err := w.ingest(ctx, batch); err != nil {
		t.Fatal(err)
	}
	before := codesOf(t, st)
	if len(before) != 1 || !strings.HasPrefix(before[0], "sequence-gap") {
		t.Fatalf("before pruning: %q", before)
	}
	n, err := st.Prune(ctx, 0, 2)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("pruned nothing")
	}
	if _, err := st.Record(ctx, headers.Coordinate{Channel: chB, Offset: 2}); !errors.Is(err, ErrNotFound) {
		t.Errorf("claimed record b@2 survived pruning to 2 records: %v", err)
	}
	if after := codesOf(t, st); !slices.Equal(after, before) {
		t.Errorf("after pruning: %q, want %q (no false unsettleable claim on the pruned b@2)", after, before)
	}
}

func TestSchemaVersionIsChecked(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "t.db")
	st, err := OpenStore(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.db.ExecContext(ctx, `UPDATE meta SET v = '999' WHERE k = 'schema'`); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, err := OpenStore(ctx, path); !errors.Is(err, ErrSchemaVersion) {
		t.Errorf("opening a store of schema 999: %v, want ErrSchemaVersion", err)
	}
}

// FuzzStampHeaders: the store's own header encoding round-trips, and its
// decoder fails cleanly on corrupt bytes.
func FuzzStampHeaders(f *testing.F) {
	f.Add([]byte("vc"), []byte{1, 2, 3}, []byte{0x02, 'v', 'c', 0x80})
	f.Fuzz(func(t *testing.T, key, value, junk []byte) {
		hs := []headers.Header{{Key: headers.HeaderVC, Value: value}, {Key: string(key), Value: value}, {Key: headers.HeaderCauses, Value: junk}}
		enc := encodeStampHeaders(nil, hs)
		dec, err := decodeStampHeaders(enc)
		if err != nil {
			t.Fatal(err)
		}
		var want []headers.Header
		for _, h := range hs {
			if isStampHeader(h.Key) {
				want = append(want, h)
			}
		}
		if len(dec) != len(want) {
			t.Fatalf("%d headers back, want %d", len(dec), len(want))
		}
		for i := range dec {
			if dec[i].Key != want[i].Key || string(dec[i].Value) != string(want[i].Value) {
				t.Fatalf("header %d: %q=%x, want %q=%x", i, dec[i].Key, dec[i].Value, want[i].Key, want[i].Value)
			}
		}
		if _, err := decodeStampHeaders(junk); err != nil && !errors.Is(err, errCorruptStore) {
			t.Fatalf("decode junk: %v", err)
		}
	})
}

func TestPruneByAge(t *testing.T) {
	ctx := context.Background()
	st, w := newTestWriter(t)
	var batch []incoming
	for i := range 6 {
		batch = append(batch, incoming{Channel: chB, Topic: "b", Offset: int64(i), Timestamp: int64(1000 * i)})
	}
	if err := w.ingest(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Prune(ctx, 3000, 0); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		_, err := st.Record(ctx, headers.Coordinate{Channel: chB, Offset: int64(i)})
		if kept := err == nil; kept != (i >= 3) {
			t.Errorf("record with timestamp %d kept %v after pruning below 3000", 1000*i, kept)
		}
	}
}

// widening stores n records on chA, record i claiming width(i) channels,
// one a millisecond.
func widening(t *testing.T, n int, width func(i int) int) *Store {
	t.Helper()
	st, w := newTestWriter(t)
	var batch []incoming
	for i := range n {
		claims := map[headers.Channel]int64{}
		for p := range width(i) {
			claims[headers.Channel{Topic: headers.TopicID{0xd}, Partition: int32(p)}] = 0
		}
		r := rec(t, int64(i), 0, claims)
		r.Timestamp = int64(i)
		batch = append(batch, r)
	}
	if err := w.ingest(context.Background(), batch); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestGrowthFromRunStatistics judges a large topic (5,000 records, 79
// statistics runs) from its run statistics: widening stamps are found,
// steady ones are not.
func TestGrowthFromRunStatistics(t *testing.T) {
	for _, tc := range []struct {
		name  string
		width func(i int) int
		want  bool
	}{
		{"widening", func(i int) int { return 1 + i/400 }, true},
		{"steady", func(i int) int { return 4 + i%3 }, false},
		// A clock filling to its 8 channels over the first 1,750 records,
		// then level (quarters 3.5 → 7.6 → 8 → 8): warm-up, not growth.
		{"warm-up that levels off", func(i int) int { return min(8, 1+i/250) }, false},
		// Still rising in the last quarter, if more slowly.
		{"slowing but sustained", func(i int) int { return 1 + int(math.Sqrt(float64(i))/6) }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st := widening(t, 5000, tc.width)
			var runs int
			st.db.QueryRowContext(ctx, `SELECT count(*) FROM chan_stats`).Scan(&runs)
			if runs < growthFineBelow {
				t.Fatalf("%d statistics runs; the test must exercise the coarse path", runs)
			}
			got := codesOf(t, st)
			found := len(got) == 1 && strings.HasPrefix(got[0], "stamp-growth "+at(4999)+" "+at(0))
			if found != tc.want || (!tc.want && len(got) != 0) {
				t.Errorf("findings %q, want stamp growth %v", got, tc.want)
			}
		})
	}
}

// TestGrowthIgnoresWarmUpOnASmallTopic: the shape a soak reported as a
// false alarm — 268 records whose producer's clock fills to 8 channels and
// levels off (quarters 4.4 → 7.9 → 8.0 → 8.0) — is judged record by record
// and is not growth; the same topic widening to the end is.
func TestGrowthIgnoresWarmUpOnASmallTopic(t *testing.T) {
	for _, tc := range []struct {
		name  string
		width func(i int) int
		want  bool
	}{
		{"warm-up", func(i int) int { return min(8, 1+i/10) }, false},
		{"growing", func(i int) int { return 1 + i/30 }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := codesOf(t, widening(t, 268, tc.width))
			found := len(got) == 1 && strings.HasPrefix(got[0], "stamp-growth "+at(267)+" "+at(0))
			if found != tc.want || (!tc.want && len(got) != 0) {
				t.Errorf("findings %q, want stamp growth %v", got, tc.want)
			}
		})
	}
}

// TestTransactionsSettle writes transactional records whose markers come
// in the same batch, in a later batch, and after the writer restarted over
// the store, and checks each record ends as the marker says: committed
// records are data, aborted ones aborted, and a transaction still open
// stays pending.
func TestTransactionsSettle(t *testing.T) {
	ctx := context.Background()
	st, w := newTestWriter(t)
	txn := func(off, pid int64) incoming {
		in := rec(t, off, 0, nil)
		in.Transactional, in.ProducerID = true, pid
		return in
	}
	marker := func(off, pid int64, commit bool) incoming {
		return incoming{Channel: chA, Topic: "a", Offset: off, Timestamp: off, Control: true, Commit: commit, Transactional: true, ProducerID: pid}
	}
	// Producer 1 commits within one batch; producer 2's transaction spans
	// two batches and aborts; producer 3's spans a restart and commits;
	// producer 4's stays open.
	batches := [][]incoming{
		{txn(0, 1), txn(1, 2), txn(2, 1), marker(3, 1, true), txn(4, 2), txn(5, 3)},
		{txn(6, 2), marker(7, 2, false), txn(8, 4)},
	}
	for _, b := range batches {
		if err := w.ingest(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	w.close()
	w2, err := newWriter(ctx, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w2.close)
	if err := w2.ingest(ctx, []incoming{txn(9, 3), marker(10, 3, true)}); err != nil {
		t.Fatal(err)
	}
	want := map[int64]string{0: "data", 1: "aborted", 2: "data", 3: "marker", 4: "aborted", 5: "data", 6: "aborted", 7: "marker", 8: "pending", 9: "data", 10: "marker"}
	for off, kind := range want {
		r, err := st.Record(ctx, headers.Coordinate{Channel: chA, Offset: off})
		if err != nil {
			t.Fatal(err)
		}
		got := "data"
		switch {
		case r.Control:
			got = "marker"
		case r.Aborted:
			got = "aborted"
		case r.Pending:
			got = "pending"
		}
		if got != kind {
			t.Errorf("record at %d is %s, want %s", off, got, kind)
		}
	}
}
