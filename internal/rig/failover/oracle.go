package failover

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/parsley-go/parsley/internal/rig/oracle"
)

// Input is what the source topics hold, read_committed: for each order ID
// whether its order committed and how many of its payments did. Aborted
// holds the IDs the producer wrote only in aborted transactions.
type Input struct {
	Ordered  map[string]bool
	Payments map[string]int
	Aborted  map[string]bool
}

// Output is one settlement read from the output topic, read_committed, in
// partition offset order.
type Output struct {
	Key       string
	Value     string
	Partition int32
	Offset    int64
}

// Violation is one way the outputs break the pipeline's contract.
type Violation struct {
	Key    string
	Reason string
}

func (v Violation) String() string { return v.Key + ": " + v.Reason }

// Check is the soak's oracle. For every order ID the settlements must be
// exactly "ordered", "settled 1", …, "settled n" in offset order, n the
// number of committed payments: a missing entry is a lost record, a
// repeated one a duplicate, "early" or a settlement before "ordered" a
// payment delivered before its causing order, a wrong final count wrong
// per-key state. An ID written only in aborted transactions has no
// settlement at all. The result is sorted by key.
func Check(in Input, outs []Output) []Violation {
	byKey := make(map[string][]Output)
	for _, o := range outs {
		byKey[o.Key] = append(byKey[o.Key], o)
	}
	var vs []Violation
	add := func(key, format string, args ...any) {
		vs = append(vs, Violation{Key: key, Reason: fmt.Sprintf(format, args...)})
	}
	keys := make(map[string]bool)
	for k := range in.Ordered {
		keys[k] = true
	}
	for k := range in.Payments {
		keys[k] = true
	}
	for k := range byKey {
		keys[k] = true
	}
	for k := range in.Aborted {
		keys[k] = true
	}
	for _, k := range sortedKeys(keys) {
		got := byKey[k]
		if in.Aborted[k] {
			if in.Ordered[k] || in.Payments[k] > 0 {
				add(k, "in both aborted and committed transactions: the soak's producer is broken")
			}
			if len(got) > 0 {
				add(k, "written only in aborted transactions, yet %d settlements delivered (first %q at %s)", len(got), got[0].Value, at(got[0]))
			}
			continue
		}
		if !in.Ordered[k] {
			if len(got) > 0 {
				add(k, "no committed order, yet %d settlements (first %q at %s)", len(got), got[0].Value, at(got[0]))
			}
			continue
		}
		want := make([]string, 0, 1+in.Payments[k])
		want = append(want, "ordered")
		for i := 1; i <= in.Payments[k]; i++ {
			want = append(want, "settled "+strconv.Itoa(i))
		}
		vals := make([]string, len(got))
		for i, o := range got {
			vals[i] = o.Value
		}
		if slices.Equal(vals, want) {
			continue
		}
		for _, o := range got {
			if o.Value == "early" {
				add(k, "a payment was delivered before its order (early at %s)", at(o))
			}
		}
		if i := slices.Index(vals, "ordered"); i > 0 && strings.HasPrefix(vals[0], "settled") {
			add(k, "settlement %q at %s precedes the order", vals[0], at(got[0]))
		}
		// Lost and duplicated settlements: the kit's oracle, each value of
		// the key's expected sequence a source ranked by its place in it.
		wantSet := make(map[string]bool, len(want))
		for _, v := range want {
			wantSet[v] = true
		}
		ds := make([]oracle.Delivery, len(got))
		for i, o := range got {
			ds[i] = oracle.Delivery{Source: o.Value, At: at(o), Lane: k, Rank: int64(slices.Index(want, o.Value))}
		}
		lost := make(map[string]bool)
		times := make(map[string]int)
		for _, f := range oracle.ExactlyOnceInOrder(wantSet, ds) {
			switch f.Kind {
			case oracle.Lost:
				lost[f.Source] = true
			case oracle.Duplicated:
				times[f.Source]++
			}
		}
		for _, v := range want {
			switch {
			case lost[v]:
				add(k, "%q lost", v)
			case times[v] > 0:
				add(k, "%q delivered %d times", v, times[v]+1)
			}
		}
		if n := len(vals); n > 0 && vals[n-1] != want[len(want)-1] {
			add(k, "final state %q, want %q", vals[n-1], want[len(want)-1])
		}
		if len(vs) == 0 || vs[len(vs)-1].Key != k {
			add(k, "settlements %q, want %q", vals, want)
		}
	}
	return vs
}

func at(o Output) string { return fmt.Sprintf("partition %d offset %d", o.Partition, o.Offset) }

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
