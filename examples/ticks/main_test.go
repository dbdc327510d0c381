package main

import (
	"bytes"
	"context"
	"fmt"
	"github.com/parsley-go/parsley/examples/internal/excli"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/examples/internal/extest"
)

func TestTicks(t *testing.T) {
	extest.NoLeftovers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out bytes.Buffer
	const windows = 3
	if err := run(ctx, &out, excli.Target{Prefix: "t."}, 150*time.Millisecond, windows); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	text := out.String()
	if !strings.Contains(text, fmt.Sprintf("%d sales totalled", 2*windows)) {
		t.Fatalf("missing summary:\n%s", text)
	}
	// Windows are numbered 1, 2, 3, ... from the persisted tick slot, and
	// the totals each report follows never go down.
	re := regexp.MustCompile(`audit: window (\d+) closed \(after (\d+) totals\)`)
	ms := re.FindAllStringSubmatch(text, -1)
	if len(ms) < windows {
		t.Fatalf("saw %d window reports, want at least %d:\n%s", len(ms), windows, text)
	}
	last := -1
	for i, m := range ms {
		n, _ := strconv.Atoi(m[1])
		covered, _ := strconv.Atoi(m[2])
		if n != i+1 {
			t.Errorf("report %d is window %d", i+1, n)
		}
		if covered < last {
			t.Errorf("window %d covers %d totals, fewer than the window before (%d)", n, covered, last)
		}
		last = covered
	}
	// Totals are running sums per till: north reaches 10+11+12.
	if !strings.Contains(text, "total north=33") || !strings.Contains(text, "total south=33") {
		t.Errorf("running totals missing:\n%s", text)
	}
}
