package observer

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/parsley-go/parsley/headers"
)

// claimOn builds an untagged record at off on ch claiming value on chB.
func claimOn(t *testing.T, ch headers.Channel, off, value int64) incoming {
	t.Helper()
	var st headers.Stamp
	st.Clock.SetOffset(chB, value)
	hs, err := headers.AppendStamp([]headers.Header(nil), &st, headers.DialectVC)
	if err != nil {
		t.Fatal(err)
	}
	return incoming{Channel: ch, Topic: "claimer", Offset: off, Timestamp: off, Headers: hs}
}

// TestClaimBlocksFindEveryClaim: however the claims of a channel's records
// move — by one, by more than a block may span, back and forth, repeating
// — the effects of a claimed position are exactly the records claiming it,
// as a row per claim would give.
func TestClaimBlocksFindEveryClaim(t *testing.T) {
	for _, tc := range []struct {
		name  string
		value func(i int64) int64
		batch int
	}{
		{"advancing by one", func(i int64) int64 { return i }, 150},
		{"jumps wider than a block spans", func(i int64) int64 { return i * (claimSpan + 44) }, 150},
		{"back and forth", func(i int64) int64 { return (i * 37) % 200 }, 150},
		{"repeating in runs", func(i int64) int64 { return i / 5 }, 150},
		{"near the span bound", func(i int64) int64 { return (i % 2) * claimSpan }, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st, w := newTestWriter(t)
			const n = 200
			want := map[int64][]string{} // value → coordinates claiming it
			var all []incoming
			for i := range int64(n) {
				// Two claiming channels interleaved, the second lagging.
				for j, ch := range []headers.Channel{chA, chC} {
					v := tc.value(max(i-int64(3*j), 0))
					all = append(all, claimOn(t, ch, i, v))
					want[v] = append(want[v], headers.Coordinate{Channel: ch, Offset: i}.String())
				}
			}
			for len(all) > 0 {
				k := min(tc.batch, len(all))
				if err := w.ingest(ctx, all[:k]); err != nil {
					t.Fatal(err)
				}
				all = all[k:]
			}
			values := slices.Sorted(maps.Keys(want))
			values = append(values, values[len(values)-1]+1, -1) // claimed by none
			for _, v := range values {
				r := &Record{Coordinate: headers.Coordinate{Channel: chB, Offset: v}}
				got, _, err := st.effects(ctx, st.db, r, 1<<20)
				if err != nil {
					t.Fatal(err)
				}
				var ids []string
				for _, g := range got {
					ids = append(ids, g.Coordinate.String())
				}
				slices.Sort(ids)
				exp := slices.Sorted(slices.Values(want[v]))
				if !slices.Equal(ids, exp) {
					t.Errorf("effects of %s: %v, want %v", r.Coordinate, ids, exp)
				}
			}
		})
	}
}

// TestClaimBlocksAreFewRows: claims advancing by one on every record are
// stored a block per claimBlockPairs claims, not a row per claim.
func TestClaimBlocksAreFewRows(t *testing.T) {
	ctx := context.Background()
	st, w := newTestWriter(t)
	var batch []incoming
	for i := range int64(3 * claimBlockPairs) {
		batch = append(batch, claimOn(t, chA, i, i))
	}
	if err := w.ingest(ctx, batch); err != nil {
		t.Fatal(err)
	}
	var rows int
	if err := st.db.QueryRowContext(ctx, `SELECT count(*) FROM claims`).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != 3 {
		t.Errorf("%d claims rows for %d changed claims, want 3 blocks", rows, len(batch))
	}
}

// TestUnsettleableClaimsInBlocks: a block whose values span a marker or a
// skipped range without claiming it is not a finding; a claim on one is,
// with its first claimer and the number of claims; so is a claim past the
// log end.
func TestUnsettleableClaimsInBlocks(t *testing.T) {
	ctx := context.Background()
	st, w := newTestWriter(t)
	var batch []incoming
	for i := range int64(20) {
		batch = append(batch, incoming{Channel: chB, Topic: "b", Offset: i, Timestamp: i})
	}
	batch[10] = incoming{Channel: chB, Topic: "b", Offset: 10, Timestamp: 10, Control: true, Commit: true}
	// Offsets 20..22 skipped by the fetch: a gap.
	batch = append(batch, incoming{Channel: chB, Topic: "b", Offset: 23, Timestamp: 23})
	for i, v := range []int64{9, 11, 12, 19, 23, 10, 11, 10, 21, 30} {
		batch = append(batch, claimOn(t, chA, int64(i), v))
	}
	if err := w.ingest(ctx, batch); err != nil {
		t.Fatal(err)
	}
	fs, err := st.Findings(ctx, map[headers.Channel]ChannelOffsets{chB: {Name: "b", End: 24, Stable: 24}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, f := range fs {
		if f.Code != CodeUnsettleableClaim {
			t.Errorf("unexpected finding %s %v", f.Code, f.Coordinates)
			continue
		}
		got[f.Coordinates[0]+" "+f.Coordinates[1]] = f.Count
	}
	b := func(off int64) string { return headers.Coordinate{Channel: chB, Offset: off}.String() }
	want := map[string]int{
		at(5) + " " + b(10): 2, // the marker, claimed by a@5 and a@7
		at(8) + " " + b(21): 1, // the skipped range
		at(9) + " " + b(30): 1, // past the log end
	}
	if !maps.Equal(got, want) {
		t.Errorf("unsettleable claims (first claimer, claimed → count) = %v, want %v", got, want)
	}
}

// TestPruneSplitsClaimBlocks: pruning inside a block keeps the claims of
// the records that stay and drops those of the records that go.
func TestPruneSplitsClaimBlocks(t *testing.T) {
	ctx := context.Background()
	st, w := newTestWriter(t)
	var batch []incoming
	for i := range int64(10) {
		batch = append(batch, claimOn(t, chA, i, 100+i))
	}
	if err := w.ingest(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Prune(ctx, 0, 4); err != nil {
		t.Fatal(err)
	}
	for v := int64(100); v < 110; v++ {
		got, _, err := st.effects(ctx, st.db, &Record{Coordinate: headers.Coordinate{Channel: chB, Offset: v}}, 100)
		if err != nil {
			t.Fatal(err)
		}
		wantN := 0
		if v >= 106 {
			wantN = 1
		}
		if len(got) != wantN || (wantN == 1 && got[0].Coordinate.Offset != v-100) {
			t.Errorf("after pruning to 4 records, effects of b@%d: %d records, want %d", v, len(got), wantN)
		}
	}
	var lo, rec, hi, last int64
	if err := st.db.QueryRowContext(ctx, `SELECT lo, rec, hi, last FROM claims`).Scan(&lo, &rec, &hi, &last); err != nil {
		t.Fatal(err)
	}
	if lo != 106 || hi != 109 || last-rec != 3 {
		t.Errorf("the pruned block is lo %d hi %d records %d..%d, want 106..109 over 4 records", lo, hi, rec, last)
	}
}

func TestClaimPairsRoundTripAndCorruption(t *testing.T) {
	pairs := []claimPair{{5, 1}, {7, 2}, {5, 9}, {5 + claimSpan, 1 << 40}}
	got, err := decodeClaimPairs(nil, 5, encodeClaimPairs(5, pairs))
	if err != nil || !slices.Equal(got, pairs) {
		t.Errorf("round trip: %v, %v; want %v", got, err, pairs)
	}
	b := encodeClaimPairs(5, pairs)
	for _, bad := range [][]byte{b[:len(b)-1], {0x80}, {0x01, 0xff}} {
		if _, err := decodeClaimPairs(nil, 5, bad); !errors.Is(err, errCorruptClaims) {
			t.Errorf("decode % x: %v, want errCorruptClaims", bad, err)
		}
	}
}
