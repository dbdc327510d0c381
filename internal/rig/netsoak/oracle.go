package netsoak

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/parsley-go/parsley/internal/rig/oracle"
)

// Observed is what the oracle reads back after a run: each stage's output
// topic (read_committed, every partition in offset order) and the stream
// (in stream-sequence order, From being the forwarded record's coordinate).
type Observed struct {
	Settled []Output
	Audited []Output
	Stream  []Output
}

// Violation is one broken guarantee, named by the record at fault.
type Violation struct {
	Kind   string // lost, duplicated, aborted-delivered, unknown-source, order, state
	Where  string // settled, audited or stream
	Record string
	Detail string
}

func (v Violation) String() string {
	return fmt.Sprintf("%s %s at %s: %s", v.Where, v.Kind, v.Record, v.Detail)
}

// Verdict is the oracle's judgement of one run.
type Verdict struct {
	Inputs, Committed, Aborted int
	Settled, Audited, Streamed int
	Violations                 []Violation
}

// OK reports a run with no violation.
func (v *Verdict) OK() bool { return len(v.Violations) == 0 }

// Summary is the one line a run prints.
func (v *Verdict) Summary() string {
	kinds := make(map[string]int)
	for _, x := range v.Violations {
		kinds[x.Where+"/"+x.Kind]++
	}
	var ks []string
	for k, n := range kinds {
		ks = append(ks, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(ks)
	s := fmt.Sprintf("inputs=%d committed=%d aborted=%d settled=%d audited=%d streamed=%d violations=%d",
		v.Inputs, v.Committed, v.Aborted, v.Settled, v.Audited, v.Streamed, len(v.Violations))
	if len(ks) > 0 {
		s += " (" + strings.Join(ks, " ") + ")"
	}
	return s
}

// Judge checks a run. Settle, audit and the bridge each run one task per
// partition, so the causal pairs a task can see are the records of its
// own input partition: every two inputs are ordered by G (the producer
// awaited and folded each one before stamping the next), so settle's
// output in each partition must follow G; audit's and the stream's must
// follow their upstream offsets partition by partition.
func Judge(t *Truth, o *Observed) *Verdict {
	v := &Verdict{Inputs: len(t.Inputs), Settled: len(o.Settled), Audited: len(o.Audited), Streamed: len(o.Stream)}
	add := func(kind, where, rec, format string, args ...any) {
		v.Violations = append(v.Violations, Violation{Kind: kind, Where: where, Record: rec, Detail: fmt.Sprintf(format, args...)})
	}
	byCoord, byKey := t.committed()
	aborted := make(map[string]bool)
	for _, in := range t.Inputs {
		if in.Committed {
			v.Committed++
		} else {
			v.Aborted++
			aborted[in.Coord()] = true
		}
	}
	rank := make(map[string]int64)
	for _, ins := range byKey {
		for i, in := range ins {
			rank[in.Coord()] = int64(i + 1)
		}
	}

	// settle: one output per committed input, none for an aborted one, G
	// order per partition (the kit's oracle), and the exact count per key.
	want := make(map[string]bool, len(byCoord))
	for c := range byCoord {
		want[c] = true
	}
	ds := make([]oracle.Delivery, len(o.Settled))
	for i, out := range o.Settled {
		ds[i] = oracle.Delivery{Source: out.Src, At: coord("settled", out.Partition, out.Offset), Lane: strconv.Itoa(int(out.Partition)), Rank: out.G}
	}
	counted := make([]bool, len(ds)) // a first delivery of a committed input
	for i := range counted {
		counted[i] = true
	}
	for _, f := range oracle.ExactlyOnceInOrder(want, ds) {
		switch f.Kind {
		case oracle.Lost:
			in := byCoord[f.Source]
			add("lost", "settled", f.Source, "committed input g=%d key=%q never settled", in.G, in.Key)
		case oracle.Unexpected:
			counted[f.Index] = false
			if aborted[f.Source] {
				add("aborted-delivered", "settled", f.At, "derived from aborted input %s", f.Source)
			} else {
				add("unknown-source", "settled", f.At, "derived from %s, which the producer never committed", f.Source)
			}
		case oracle.Duplicated:
			counted[f.Index] = false
			add("duplicated", "settled", f.At, "input %s already settled at %s", f.Source, f.Prev)
		case oracle.Order:
			out, prev := o.Settled[f.Index], byCoord[f.Prev]
			add("order", "settled", f.At, "input g=%d (%s) delivered after g=%d (%s), its effect", out.G, out.Src, prev.G, f.Prev)
		}
	}
	for i, out := range o.Settled {
		if !counted[i] {
			continue
		}
		in := byCoord[out.Src]
		if out.G != in.G || out.Key != in.Key {
			add("state", "settled", ds[i].At, "carries g=%d key=%q for input %s (g=%d key=%q)", out.G, out.Key, out.Src, in.G, in.Key)
		}
		if want := rank[out.Src]; out.N != want {
			add("state", "settled", ds[i].At, "count for key %q is %d after input %s, want %d", out.Key, out.N, out.Src, want)
		}
	}

	settled := indexOutputs("settled", o.Settled)
	audited := indexOutputs("audited", o.Audited)
	judgeHop(v, "audited", settled, o.Audited, func(out Output) string { return coord("audited", out.Partition, out.Offset) })
	judgeHop(v, "stream", audited, o.Stream, func(out Output) string { return fmt.Sprintf("stream#%d", out.Offset) })
	sort.SliceStable(v.Violations, func(i, j int) bool { return v.Violations[i].String() < v.Violations[j].String() })
	return v
}

func indexOutputs(topic string, outs []Output) map[string]Output {
	m := make(map[string]Output, len(outs))
	for _, out := range outs {
		m[coord(topic, out.Partition, out.Offset)] = out
	}
	return m
}

// judgeHop checks a hop that forwards each upstream record once: every
// upstream record arrives exactly once, nothing arrives that upstream did
// not commit, the payload is unchanged, and per upstream partition the
// records arrive in upstream offset order.
func judgeHop(v *Verdict, where string, upstream map[string]Output, outs []Output, name func(Output) string) {
	add := func(kind, rec, format string, args ...any) {
		v.Violations = append(v.Violations, Violation{Kind: kind, Where: where, Record: rec, Detail: fmt.Sprintf(format, args...)})
	}
	want := make(map[string]bool, len(upstream))
	for c := range upstream {
		want[c] = true
	}
	ds := make([]oracle.Delivery, len(outs))
	for i, out := range outs {
		up := upstream[out.From]
		ds[i] = oracle.Delivery{Source: out.From, At: name(out), Lane: strconv.Itoa(int(up.Partition)), Rank: up.Offset}
	}
	counted := make([]bool, len(ds))
	for i := range counted {
		counted[i] = true
	}
	for _, f := range oracle.ExactlyOnceInOrder(want, ds) {
		switch f.Kind {
		case oracle.Lost:
			add("lost", f.Source, "never forwarded")
		case oracle.Unexpected:
			counted[f.Index] = false
			add("aborted-delivered", f.At, "forwards %s, which is no committed upstream record", f.Source)
		case oracle.Duplicated:
			counted[f.Index] = false
			add("duplicated", f.At, "%s already forwarded as %s", f.Source, f.Prev)
		case oracle.Order:
			add("order", f.At, "%s arrived after %s, which it precedes", f.Source, f.Prev)
		}
	}
	for i, out := range outs {
		if up := upstream[out.From]; counted[i] && (out.Src != up.Src || out.G != up.G || out.N != up.N || out.Key != up.Key) {
			add("state", ds[i].At, "payload of %s changed in transit", out.From)
		}
	}
}
