package failover

import (
	"strings"
	"testing"
)

func outs(key string, vals ...string) []Output {
	var o []Output
	for i, v := range vals {
		o = append(o, Output{Key: key, Value: v, Offset: int64(i)})
	}
	return o
}

func TestCheckAcceptsTheExactSettlements(t *testing.T) {
	in := Input{
		Ordered:  map[string]bool{"a": true, "b": true},
		Payments: map[string]int{"a": 2},
		Aborted:  map[string]bool{"x": true},
	}
	got := append(outs("a", "ordered", "settled 1", "settled 2"), outs("b", "ordered")...)
	if vs := Check(in, got); len(vs) != 0 {
		t.Fatalf("violations on a correct run: %v", vs)
	}
}

// TestCheckCatchesBrokenOutputs feeds the oracle hand-made broken runs,
// one fault each, and checks each is reported against the right key.
func TestCheckCatchesBrokenOutputs(t *testing.T) {
	in := Input{
		Ordered:  map[string]bool{"a": true},
		Payments: map[string]int{"a": 2},
		Aborted:  map[string]bool{"x": true},
	}
	for _, tc := range []struct {
		name, key, reason string
		outs              []Output
	}{
		{"lost", "a", `"settled 2" lost`, outs("a", "ordered", "settled 1")},
		{"duplicated", "a", `"settled 1" delivered 2 times`, outs("a", "ordered", "settled 1", "settled 1", "settled 2")},
		{"early", "a", "before its order", outs("a", "early", "ordered", "settled 1", "settled 2")},
		{"reordered", "a", "precedes the order", outs("a", "settled 1", "ordered", "settled 2")},
		{"wrong state", "a", `final state "settled 1"`, outs("a", "ordered", "settled 2", "settled 1")},
		{"aborted delivered", "x", "only in aborted transactions", append(outs("a", "ordered", "settled 1", "settled 2"), outs("x", "ordered")...)},
		{"phantom", "p", "no committed order", append(outs("a", "ordered", "settled 1", "settled 2"), outs("p", "ordered")...)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := Check(in, tc.outs)
			found := false
			for _, v := range vs {
				if v.Key == tc.key && strings.Contains(v.Reason, tc.reason) {
					found = true
				}
			}
			if !found {
				t.Fatalf("violations %v, want one for %s containing %q", vs, tc.key, tc.reason)
			}
		})
	}
}
