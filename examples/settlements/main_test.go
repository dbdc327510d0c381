package main

import (
	"bytes"
	"context"
	"github.com/parsley-go/parsley/examples/internal/excli"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/examples/internal/extest"
)

func TestSettlements(t *testing.T) {
	extest.NoLeftovers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out bytes.Buffer
	if err := run(ctx, &out, excli.Target{Prefix: "t."}, 20); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{
		"written: 20 invoices, 20 payments, 10 refunds",
		"final balance inv-1: settled",
		"final balance inv-2: refunded 20",
		"final balance inv-20: refunded 200",
		"ledger folded 50 events, 0 out of causal order",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
}
