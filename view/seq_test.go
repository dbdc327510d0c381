package view_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/view"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A token's sequence claims (a send of a stamping node not yet resolved to
// an offset, which a clock folds from a stage's outputs it observed) are
// waited for on the
// task's delivered-sequence marks (ds/): GetAfter with the claim of a send
// not yet made waits, saying which sender and sequence; once the send is
// delivered it returns the state that counts it.
func TestTokenSequenceClaims(t *testing.T) {
	ctx := testCtx(t)
	f := newFixture(t, 1)
	f.run(t)
	v := f.startView(t)
	if err := v.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	sender := headers.SenderID{0x5e, 15: 1} // a stamping node upstream
	ordersID, err := f.c.TopicID(ctx, "orders")
	if err != nil {
		t.Fatal(err)
	}
	ch := headers.Channel{Topic: headers.TopicID(ordersID), Partition: 0}
	// send writes an order as a stamping node does: tagged with its
	// sender ID and the send's sequence on the channel.
	send := func(amount int, seq int64) {
		rec := &kgo.Record{Topic: "orders", Partition: 0, Key: []byte("o"), Value: []byte(strconv.Itoa(amount))}
		hs, err := headers.AppendStamp(rec.Headers, &headers.Stamp{Tagged: true, Sender: sender, Seq: seq}, headers.DialectVC)
		if err != nil {
			t.Fatal(err)
		}
		rec.Headers = hs
		if err := f.c.Client().ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	seqToken := func(s headers.SenderID, seq int64) view.Token {
		c := new(headers.Clock)
		c.SetSeq(ch, s, seq)
		tok := view.TokenOf(c)
		for e := range tok.Clock().OffsetEntries() {
			t.Fatalf("token has offset entry %v, want only the sequence claim", e)
		}
		return tok
	}

	s, seq := sender, int64(1)
	send(10, seq)
	if n, ok, err := v.GetAfter(ctx, seqToken(s, seq), "o"); err != nil || !ok || n != 10 {
		t.Fatalf("GetAfter(first send's claim) = %d, %v, %v; want 10", n, ok, err)
	}

	// The next send's claim, before it is made: the read waits for it.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, _, err = v.GetAfter(short, seqToken(s, seq+1), "o")
	cancel()
	var we *view.WaitError
	if !errors.As(err, &we) || !errors.Is(err, view.ErrNotYet) || len(we.Awaiting) != 1 {
		t.Fatalf("GetAfter(a claim not yet sent) = %v; want a *WaitError with one claim", err)
	}
	if a := we.Awaiting[0]; a.Channel != ch || a.Offset != -1 || a.Sender != s || a.Seq != seq+1 || a.NotStarted {
		t.Errorf("awaited %+v; want %s sender %s seq %d", a, ch, s, seq+1)
	}
	t.Log(err)

	send(5, seq+1)
	if n, ok, err := v.GetAfter(ctx, seqToken(s, seq+1), "o"); err != nil || !ok || n != 15 {
		t.Errorf("GetAfter(second send's claim) = %d, %v, %v; want 15", n, ok, err)
	}
}
