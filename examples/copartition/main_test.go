package main

import (
	"bytes"
	"context"
	"github.com/parsley-go/parsley/examples/internal/excli"
	"strings"
	"testing"
	"time"
)

// TestCopartition runs the example both ways: with a payment producer that
// does not partition with murmur2, payments settle without their orders and
// the stage warns, counts and the observer reports it; with murmur2 nothing
// is lost and all three stay quiet.
func TestCopartition(t *testing.T) {
	for _, tc := range []struct {
		partitioner string
		loud        bool
	}{{"murmur2", false}, {"fnv", true}} {
		t.Run(tc.partitioner, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			var out bytes.Buffer
			if err := run(ctx, &out, excli.Target{Prefix: "t-"}, tc.partitioner, 12); err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			text := out.String()
			signs := []string{
				"claims a cause that another task consumes", // the stage's WARN
				"parsley_cross_task_claims_total{",          // its metric
				"cross-partition-cause",                     // the observer's finding
				"payments settled without their order\n",    // present either way; checked below
			}
			for _, s := range signs[:3] {
				if strings.Contains(text, s) != tc.loud {
					t.Errorf("%s: output mentions %q = %v, want %v:\n%s", tc.partitioner, s, !tc.loud, tc.loud, text)
				}
			}
			lost := !strings.Contains(text, "settlement stage: 0 payments settled without their order")
			if lost != tc.loud {
				t.Errorf("%s: payments settled without their order = %v, want %v:\n%s", tc.partitioner, lost, tc.loud, text)
			}
			if broken := strings.Contains(text, "the intended broken case"); broken != tc.loud {
				t.Errorf("%s: output says it is the intended broken case = %v, want %v:\n%s", tc.partitioner, broken, tc.loud, text)
			}
			if !strings.Contains(text, signs[3]) {
				t.Errorf("output lacks the settlement count:\n%s", text)
			}
			if !tc.loud && !strings.Contains(text, "observer: 0 findings") {
				t.Errorf("murmur2: the observer found something:\n%s", text)
			}
		})
	}
}
