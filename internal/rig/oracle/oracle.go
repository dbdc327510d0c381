// Package oracle is the verification kit's shared judge: given the ground
// truth of what must be delivered (each record's source identity) and what
// a hop delivered, it finds every record lost, delivered twice, delivered
// without a committed source, or delivered out of its order. The soaks
// differ in workload and faults, not in what "exactly once, in causal
// order" means; each maps its outputs to Deliveries and adds only the
// checks of its own payload (per-key state, a value's content).
//
// It is deterministic and does no I/O: a soak reads its outputs back
// first, then judges.
package oracle

import (
	"cmp"
	"fmt"
	"slices"
)

// Kind names what a Finding found.
type Kind string

const (
	// Lost: a source the truth requires was never delivered.
	Lost Kind = "lost"
	// Duplicated: a source was delivered again after its first delivery.
	Duplicated Kind = "duplicated"
	// Unexpected: a delivery whose source the truth does not require (an
	// aborted input, or one never written).
	Unexpected Kind = "unexpected"
	// Order: within a lane, a delivery of a lower or equal rank came after
	// one of a higher rank: an effect delivered before its cause.
	Order Kind = "order"
)

// Delivery is one record a hop delivered, as the oracle sees it.
type Delivery struct {
	// Source identifies the ground-truth record it derives from.
	Source string
	// At says where it was delivered (a coordinate), for findings.
	At string
	// Lane is the order domain: the deliveries of one lane must come in
	// strictly increasing Rank (a partition, a key).
	Lane string
	// Rank is the delivery's position in its lane's causal order.
	Rank int64
}

// Finding is one broken guarantee.
type Finding struct {
	Kind Kind
	// Source is the record at fault; At where it was delivered (empty
	// for Lost).
	Source, At string
	// Index is the delivery's index in the judged slice (-1 for Lost).
	Index int
	// Prev is, for Duplicated, where the source was first delivered; for
	// Order, the source of the higher-ranked delivery it came after.
	Prev string
}

func (f Finding) String() string {
	switch f.Kind {
	case Lost:
		return fmt.Sprintf("%s lost", f.Source)
	case Duplicated:
		return fmt.Sprintf("%s at %s duplicated (first at %s)", f.Source, f.At, f.Prev)
	case Order:
		return fmt.Sprintf("%s at %s delivered after %s, which it precedes", f.Source, f.At, f.Prev)
	default:
		return fmt.Sprintf("%s at %s %s", f.Source, f.At, f.Kind)
	}
}

// ExactlyOnceInOrder judges deliveries against want, the sources that
// must each be delivered exactly once. A duplicated or unexpected delivery
// is reported and then ignored: it neither counts as a source's delivery
// nor moves its lane's order. Lost findings come last, sorted by source;
// the others in delivery order.
func ExactlyOnceInOrder(want map[string]bool, ds []Delivery) []Finding {
	var fs []Finding
	first := make(map[string]string, len(ds)) // source: where first delivered
	last := make(map[string]Delivery)         // lane: its last counted delivery
	for i, d := range ds {
		if !want[d.Source] {
			fs = append(fs, Finding{Kind: Unexpected, Source: d.Source, At: d.At, Index: i})
			continue
		}
		if at, dup := first[d.Source]; dup {
			fs = append(fs, Finding{Kind: Duplicated, Source: d.Source, At: d.At, Index: i, Prev: at})
			continue
		}
		first[d.Source] = d.At
		if prev, ok := last[d.Lane]; ok && prev.Rank >= d.Rank {
			fs = append(fs, Finding{Kind: Order, Source: d.Source, At: d.At, Index: i, Prev: prev.Source})
		}
		last[d.Lane] = d
	}
	var lost []Finding
	for s, ok := range want {
		if _, seen := first[s]; ok && !seen {
			lost = append(lost, Finding{Kind: Lost, Source: s, Index: -1})
		}
	}
	slices.SortFunc(lost, func(a, b Finding) int { return cmp.Compare(a.Source, b.Source) })
	return append(fs, lost...)
}
