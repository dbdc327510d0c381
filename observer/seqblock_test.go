package observer

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"testing"

	"github.com/parsley-go/parsley/headers"
)

// TestSeqBlocksFindEveryRecord: however a sender's sequence numbers move —
// by one, with gaps wider than a block spans, going back, repeating — and
// however its records interleave with another sender's, the sequence
// index finds the record a claim names (the first, for a number used
// twice), the first record at or above a number, and the sender's last
// record, as a row per record would; after pruning, nothing pruned.
func TestSeqBlocksFindEveryRecord(t *testing.T) {
	other := headers.SenderID{0x6}
	for _, tc := range []struct {
		name  string
		seq   func(i int64) int64
		batch int
	}{
		{"by one", func(i int64) int64 { return i + 1 }, 70},
		{"gaps wider than a block spans", func(i int64) int64 { return 1 + i*(seqSpan+30) }, 70},
		{"going back", func(i int64) int64 { return 1 + (i*37)%150 }, 70},
		{"repeating", func(i int64) int64 { return 1 + i/4 }, 9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			st, w := newTestWriter(t)
			type written struct{ seq, off int64 }
			var mine []written
			var all []incoming
			for i := range int64(300) {
				s := tc.seq(i)
				all = append(all, rec(t, 2*i, s, nil))
				mine = append(mine, written{s, 2 * i})
				// Another sender's record between each two.
				hs, err := headers.AppendStamp([]headers.Header(nil), &headers.Stamp{Tagged: true, Sender: other, Seq: i + 1}, headers.DialectVC)
				if err != nil {
					t.Fatal(err)
				}
				all = append(all, incoming{Channel: chA, Topic: "a", Offset: 2*i + 1, Timestamp: 2*i + 1, Headers: hs})
			}
			for len(all) > 0 {
				k := min(tc.batch, len(all))
				if err := w.ingest(ctx, all[:k]); err != nil {
					t.Fatal(err)
				}
				all = all[k:]
			}
			var chID, senderID int64
			if err := st.db.QueryRow(`SELECT (SELECT id FROM channels WHERE topic = ?), (SELECT id FROM senders WHERE sender = ?)`,
				chA.Topic[:], sender[:]).Scan(&chID, &senderID); err != nil {
				t.Fatal(err)
			}
			check := func(below int64) {
				t.Helper()
				for _, s := range []int64{1, 2, 3, 40, 150, 151, 10_000, 80_000} {
					wantAt, wantFirst := int64(-1), int64(-1)
					for _, r := range mine {
						if r.off < below {
							continue
						}
						if r.seq == s && wantAt < 0 {
							wantAt = r.off
						}
						if r.seq >= s && (wantFirst < 0 || r.off < wantFirst) {
							wantFirst = r.off
						}
					}
					got, err := st.bySequence(ctx, st.db, headers.SeqEntry{Channel: chA, Sender: sender, Seq: s})
					switch {
					case wantAt < 0 && (err == nil || !errors.Is(err, sql.ErrNoRows)):
						t.Errorf("seq %d (records from %d): found %v (%v), want none", s, below, got, err)
					case wantAt >= 0 && (err != nil || got.Coordinate.Offset != wantAt):
						t.Errorf("seq %d (records from %d): found %v (%v), want the record at %d", s, below, got, err, wantAt)
					}
					off, ok, err := firstAtOrAbove(ctx, st.db, chID, senderID, s)
					if err != nil || ok != (wantFirst >= 0) || ok && off != wantFirst {
						t.Errorf("first at or above %d (records from %d): %d %v %v, want %d", s, below, off, ok, err, wantFirst)
					}
				}
			}
			check(0)
			// Prune the first 200 records: the first 100 of this sender's.
			if _, err := st.Prune(ctx, 0, int64(len(mine)*2-200)); err != nil {
				t.Fatal(err)
			}
			check(200)
		})
	}
}

func TestSeqPairsRoundTripAndCorruption(t *testing.T) {
	pairs := []seqPair{{5, 0, 1}, {6, 3, 2}, {4, 9, 7}, {300, 10, 8}}
	got, err := decodeSeqPairs(nil, 4, encodeSeqPairs(4, pairs))
	if err != nil || !slices.Equal(got, pairs) {
		t.Fatalf("round trip: %v %v", got, err)
	}
	if _, err := decodeSeqPairs(nil, 0, []byte{0x80}); !errors.Is(err, errCorruptSeqs) {
		t.Errorf("a truncated varint: %v, want errCorruptSeqs", err)
	}
}
