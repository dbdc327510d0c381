package main

import (
	"bytes"
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/parsley-go/parsley/examples/internal/excli"
	"github.com/parsley-go/parsley/examples/internal/extest"
)

// TestReadYourWrites runs the example with fewer requests than its
// default: every read with a token shows the write; the count of stale
// reads without one is measured and printed, whatever it is.
func TestReadYourWrites(t *testing.T) {
	extest.NoLeftovers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	const n = 100
	if err := run(ctx, &out, excli.Target{Prefix: "t."}, n); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	m := regexp.MustCompile(`read-your-writes: (\d+) reads with token, (\d+) stale; (\d+) of (\d+) reads without token stale`).FindStringSubmatch(out.String())
	if m == nil {
		t.Fatalf("no summary line:\n%s", out.String())
	}
	if m[1] != strconv.Itoa(n) || m[2] != "0" || m[4] != strconv.Itoa(n) {
		t.Fatalf("summary %q: want %d reads with token, 0 stale", m[0], n)
	}
}
