package stage

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestFailoverSoakJudge feeds the failover soak's judge hand-made runs: a
// correct one, and one each with a duplicate, an out-of-order delivery, a
// lost input, an output of no input and a wrong count injected. A
// duplicate or a reordering that keeps each output's count right is found
// only by the shared oracle, not by the payload check.
func TestFailoverSoakJudge(t *testing.T) {
	want := map[string][]string{"k0": {"v0", "v1", "v2"}, "k1": {"pre", "v0"}}
	out := func(k, v string, n, off int) arrival {
		return arrival{key: k, val: v, n: n, out: "out/0@" + strconv.Itoa(off)}
	}
	good := []arrival{out("k0", "v0", 1, 0), out("k1", "pre", 1, 1), out("k0", "v1", 2, 2), out("k1", "v0", 2, 3), out("k0", "v2", 3, 4)}
	for _, tc := range []struct {
		name string
		run  func([]arrival) []arrival
		want string // in the only violation; "" for none
	}{
		{"correct", func(as []arrival) []arrival { return as }, ""},
		{"duplicate", func(as []arrival) []arrival { return slices.Insert(as, 3, out("k0", "v1", 2, 9)) }, "k0 v1 at out/0@9 duplicated"},
		{"out of order", func(as []arrival) []arrival { as[2], as[4] = as[4], as[2]; return as }, "k0 v1 at out/0@2 delivered after k0 v2"},
		{"lost", func(as []arrival) []arrival { return slices.Delete(as, 3, 4) }, "k1 v0 lost"},
		{"no such input", func(as []arrival) []arrival { return append(as, out("k1", "v9", 3, 9)) }, "k1 v9 at out/0@9 unexpected"},
		{"wrong count", func(as []arrival) []arrival { as[2].n = 1; return as }, "counts #1 for input 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := judgeFailoverSoak(want, tc.run(slices.Clone(good)))
			if tc.want == "" {
				if len(vs) > 0 {
					t.Fatalf("a correct run judged broken: %q", vs)
				}
				return
			}
			if len(vs) != 1 || !strings.Contains(vs[0], tc.want) {
				t.Fatalf("violations %q, want one with %q", vs, tc.want)
			}
		})
	}
	if vs := judgeFailoverSoak(map[string][]string{"k0": {"v0", "v0"}}, []arrival{out("k0", "v0", 1, 0), out("k0", "v0", 2, 1)}); len(vs) == 0 {
		t.Error("an input the producer recorded twice passed unnoticed")
	}
}
