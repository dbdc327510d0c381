package main

import (
	"bytes"
	"context"
	"github.com/parsley-go/parsley/examples/internal/excli"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/examples/internal/extest"
)

// TestRunsOnEmbeddedBrokers runs the example end to end with a timeout and
// checks that every order reached the stream before its payment.
func TestRunsOnEmbeddedBrokers(t *testing.T) {
	extest.NoLeftovers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, excli.Target{Prefix: "t.x-"}, options{orders: 4, stateDir: t.TempDir()}); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	t.Log("\n" + out.String())
	line := regexp.MustCompile(`^\s+(\d+)\s+(\S+)\s+(\S+)\s+(.*)$`)
	seen := make(map[string]int)
	n := 0
	for l := range strings.SplitSeq(out.String(), "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		n++
		data := m[4]
		if _, dup := seen[data]; dup {
			t.Fatalf("%q twice in the stream", data)
		}
		seen[data] = n
		if key, ok := strings.CutPrefix(data, "payment for "); ok {
			if _, ok := seen["order "+key]; !ok {
				t.Fatalf("payment for %s at %d before its order", key, n)
			}
		}
	}
	if n != 8 {
		t.Fatalf("printed %d stream messages, want 8:\n%s", n, out.String())
	}
	if !strings.Contains(out.String(), "forwarded 8 records") {
		t.Fatalf("no summary line:\n%s", out.String())
	}
}
