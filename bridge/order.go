package bridge

import (
	"cmp"
	"slices"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/stage"
)

// storedRecord is one record of a step as JetStream stored it: its coordinate,
// the headers that carry its stamp, and its stream sequence (for a
// duplicate, the stored original's).
type storedRecord struct {
	coord   headers.Coordinate
	headers []stage.Header
	seq     uint64
}

// causalInversion is a record stored in the stream after a record that
// claims it as a cause.
type causalInversion struct {
	cause, effect storedRecord
}

// causalInversions returns every pair of the step's records in which the
// effect's stamp claims the cause (an offset entry at or above the
// cause's offset on the cause's channel, or a sequence entry at or above
// the cause's send sequence from its sender) and the stream stores the
// cause after the effect. Only that breaks what subscribers rely on:
// records the stamps do not relate are concurrent, and a step redone
// after an abort may deliver them in another valid order than the
// attempt JetStream kept.
//
// Records with sequence 0 were not acknowledged and take no part. The
// check reads stamps only when the acknowledged sequences do not rise in
// delivered order; when they do, no cause can follow its effect, since
// the gate delivers a cause before its effects.
func causalInversions(recs []storedRecord) []causalInversion {
	rising := true
	var last uint64
	for _, r := range recs {
		if r.seq == 0 {
			continue
		}
		if r.seq <= last {
			rising = false
			break
		}
		last = r.seq
	}
	if rising {
		return nil
	}
	type tagged struct {
		sender headers.SenderID
		seq    int64
		rec    int
	}
	// A channel's records in delivered order are in offset order.
	byChannel := make(map[headers.Channel][]int)
	byTag := make(map[headers.Channel][]tagged)
	stamps := make([]headers.Stamp, len(recs))
	for i := range recs {
		byChannel[recs[i].coord.Channel] = append(byChannel[recs[i].coord.Channel], i)
		// The gate read every delivered stamp already; one that fails
		// now claims nothing here.
		if headers.ReadStamp(&stamps[i], recs[i].headers) == nil && stamps[i].Tagged {
			byTag[recs[i].coord.Channel] = append(byTag[recs[i].coord.Channel], tagged{stamps[i].Sender, stamps[i].Seq, i})
		}
	}
	var out []causalInversion
	flag := func(cause, effect int) {
		if recs[effect].seq != 0 && recs[cause].seq > recs[effect].seq {
			out = append(out, causalInversion{recs[cause], recs[effect]})
		}
	}
	for e := range recs {
		for oe := range stamps[e].Clock.OffsetEntries() {
			for _, c := range byChannel[oe.Channel] {
				if recs[c].coord.Offset > oe.Offset {
					break
				}
				if c != e {
					flag(c, e)
				}
			}
		}
		for se := range stamps[e].Clock.SeqEntries() {
			for _, t := range byTag[se.Channel] {
				if t.sender == se.Sender && t.seq <= se.Seq && t.rec != e {
					flag(t.rec, e)
				}
			}
		}
	}
	slices.SortStableFunc(out, func(x, y causalInversion) int {
		return cmp.Compare(x.effect.seq, y.effect.seq)
	})
	return out
}
