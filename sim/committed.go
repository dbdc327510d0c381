package sim

import (
	"fmt"

	"github.com/parsley-go/parsley/headers"
)

// checkCommitted asserts wire constraint 8 on one stamp a node is about to
// send to dest: every offset it claims is a committed record — never a
// transaction marker, a record of an aborted or still-open transaction, or
// an offset at or past the log end — unless the position was learned from
// received metadata. A process re-expresses what others named, and a
// writer out of contract (a LegacyHost) may name markers; that breach is
// its own, and the reader settles it by the 0.2 rules. Retention does not
// matter: the simulated log keeps every entry's kind below its log start.
// A breach is an error that ends the run, like the inline H4 check.
func (n *SimNode) checkCommitted(dest headers.Channel, st *headers.Stamp) error {
	if n.spec.LegacyHost {
		return nil
	}
	for e := range st.Clock.OffsetEntries() {
		if n.w.Broker.TopicByID(e.Channel.Topic) == nil {
			continue // an unknown channel is H4's to report
		}
		if _, gone := n.w.deletedAt[e.Channel.Topic]; gone {
			continue // its log is gone with it; truncation judges the claim (StaleClaim)
		}
		what := "no entry"
		if end := n.w.Broker.End(e.Channel); e.Offset >= end {
			what = fmt.Sprintf("the log end %d or beyond", end)
		} else if x := n.w.Broker.Entry(e.Channel, e.Offset); x != nil {
			if x.Kind == Business {
				continue
			}
			what = x.Kind.String()
		}
		if n.w.Broker.namedByCommitted(headers.Coordinate{Channel: e.Channel, Offset: e.Offset}) {
			continue
		}
		return fmt.Errorf("sim: constraint 8: %s stamps %v claiming %v@%d, which holds %s, not a committed record", n.spec.Name, dest, e.Channel, e.Offset, what)
	}
	return nil
}

// namedByCommitted reports whether some committed record's stamp claims
// exactly at: a position a writer out of contract named, which readers
// fold and re-express. Slow, and only asked about positions that are no
// committed record.
func (b *Broker) namedByCommitted(at headers.Coordinate) bool {
	var st headers.Stamp
	for _, t := range b.topics {
		for _, p := range t.parts {
			for i := range p.log {
				x := &p.log[i]
				if x.Kind != Business || headers.ReadStamp(&st, x.Headers) != nil {
					continue
				}
				if o, ok := st.Clock.Offset(at.Channel); ok && o == at.Offset {
					return true
				}
			}
		}
	}
	return false
}
