package main

import (
	"bytes"
	"context"
	"fmt"
	"github.com/parsley-go/parsley/examples/internal/excli"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/examples/internal/extest"
)

func TestRequestReply(t *testing.T) {
	extest.NoLeftovers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out bytes.Buffer
	const n = 6
	if err := run(ctx, &out, excli.Target{Prefix: "t."}, n); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	text := out.String()
	if !strings.Contains(text, fmt.Sprintf("effect before reply held for all %d requests", n)) {
		t.Fatalf("missing summary:\n%s", text)
	}
	for i := 1; i <= n; i++ {
		k := fmt.Sprintf("t-%d ", i)
		l := strings.Index(text, "audit: "+k+"ledger debit "+fmt.Sprint(100*i))
		r := strings.Index(text, "audit: "+k+"reply ok")
		if l < 0 || r < 0 || l > r {
			t.Errorf("%s: ledger at %d, reply at %d:\n%s", k, l, r, text)
		}
	}
}
