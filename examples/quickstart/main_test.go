package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/examples/internal/excli"
	"github.com/parsley-go/parsley/examples/internal/extest"
)

func TestQuickstart(t *testing.T) {
	extest.NoLeftovers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out bytes.Buffer
	const n = 4
	if err := run(ctx, &out, excli.Target{}, n); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	text := out.String()
	for _, want := range []string{
		"running on the embedded broker",
		"holds payments/",
		"vc-hold-not-fetched",
		fmt.Sprintf("causal order held: all %d payments", n),
		"observer: 0 problems",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "EARLY") {
		t.Errorf("a payment was settled before its order:\n%s", text)
	}
	// Per order, the order's notification precedes the payment's.
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("o-%d:", i)
		received := strings.Index(text, id+" order")
		settled := strings.Index(text, id+" payment")
		if received < 0 || settled < 0 || received > settled {
			t.Errorf("order %s: received at %d, settled at %d:\n%s", id, received, settled, text)
		}
	}
}
