package obsdemo

import (
	"context"
	"fmt"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
)

// Spread is a topology over several multi-partition topics, so that
// observers sharing the topics in a group (a shard each) hold different
// parts of it and must judge claims on one another's partitions. Each
// round adds to it:
//
//   - on each partition of "spread-events" (4), three records of that
//     partition's stage task, one of them skipping a sequence number on
//     the partition the round picks (a sequence-gap);
//   - on each partition of "spread-ledger" (3), a record claiming the
//     newest record of every events partition, and on the one the round
//     picks, a claim past the log end of an events partition (an
//     unsettleable-claim);
//   - a record of a new retired task on "spread-retired", and a record on
//     the "spread-carriers" partition (3) the round picks still carrying a
//     sequence claim on it (a late-joiner-window, until a later round
//     writes a newer record there).
type Spread struct {
	b      *Builder
	rounds int
	seq    [4]int64 // the events senders' last sequence numbers
	last   [4]int64 // the newest offset of each events partition; -1: none
}

// Stage names of the spread topology's senders.
const (
	SpreadStage  = "spread-writer"
	SpreadRetire = "spread-retired"
)

// NewSpread creates the spread topology's topics (and the changelog topics
// that name its senders).
func (b *Builder) NewSpread(ctx context.Context) (*Spread, error) {
	if err := b.Create(ctx, 4, "spread-events"); err != nil {
		return nil, err
	}
	if err := b.Create(ctx, 3, "spread-ledger", "spread-carriers"); err != nil {
		return nil, err
	}
	if err := b.Create(ctx, 1, "spread-retired", App+"-"+SpreadStage+"-changelog"); err != nil {
		return nil, err
	}
	return &Spread{b: b, last: [4]int64{-1, -1, -1, -1}}, nil
}

// Round writes one round and returns the findings it adds: each round's
// gap and past-end claim stay; its late-joiner window holds until the
// next round's carrier on the same partition.
func (s *Spread) Round(ctx context.Context) ([]Want, error) {
	r := s.rounds
	s.rounds++
	var want []Want
	gapOn := int32(r % 4)
	for p := range int32(4) {
		sender := protocol.SenderIDFor(App, SpreadStage, p)
		for i := range 3 {
			s.seq[p]++
			if p == gapOn && i == 1 {
				s.seq[p]++ // the sequence number a lost send took
			}
			st := &headers.Stamp{Tagged: true, Sender: sender, Seq: s.seq[p]}
			if s.last[p] >= 0 {
				st.Clock.SetOffset(s.b.Ch("spread-events", p), s.last[p])
			}
			at, err := s.b.Stamped(ctx, "spread-events", p, st)
			if err != nil {
				return nil, err
			}
			if p == gapOn && i == 1 {
				want = append(want, Want{"sequence-gap", str(at, s.b.At("spread-events", p, s.last[p]))})
			}
			s.last[p] = at.Offset
		}
	}
	pastOn := int32(r % 3)
	for q := range int32(3) {
		st := &headers.Stamp{}
		for p := range int32(4) {
			st.Clock.SetOffset(s.b.Ch("spread-events", p), s.last[p])
		}
		if q == pastOn {
			claimed := s.b.At("spread-events", (pastOn+1)%4, s.last[(pastOn+1)%4]+1000+int64(r))
			st.Clock.SetOffset(claimed.Channel, claimed.Offset)
			at, err := s.b.Stamped(ctx, "spread-ledger", q, st)
			if err != nil {
				return nil, err
			}
			want = append(want, Want{"unsettleable-claim", str(at, claimed)})
			continue
		}
		if _, err := s.b.Stamped(ctx, "spread-ledger", q, st); err != nil {
			return nil, err
		}
	}
	retired := protocol.SenderIDFor(App, SpreadRetire, int32(r))
	up, err := s.b.Stamped(ctx, "spread-retired", 0, &headers.Stamp{Tagged: true, Sender: retired, Seq: 1})
	if err != nil {
		return nil, err
	}
	carrier := &headers.Stamp{}
	carrier.Clock.SetSeq(up.Channel, retired, 1)
	down, err := s.b.Stamped(ctx, "spread-carriers", int32(r%3), carrier)
	if err != nil {
		return nil, fmt.Errorf("obsdemo: spread carrier: %w", err)
	}
	want = append(want, Want{"late-joiner-window", str(down, up)})
	return want, nil
}
