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

func TestPlainProducer(t *testing.T) {
	extest.NoLeftovers(t)
	for _, tc := range []struct{ dialect, header string }{{"vc", "[headers vc]"}, {"causes", "[headers parsley.causes]"}} {
		t.Run(tc.dialect, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			var out bytes.Buffer
			if err := run(ctx, &out, excli.Target{}, tc.dialect); err != nil {
				t.Fatalf("run: %v\n%s", err, out.String())
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			want := []string{
				`producer wrote signups/0@0 "signed up" ` + tc.header + ` claims nothing`,
				`producer wrote profiles/0@0 "profile created" ` + tc.header + ` claims signups/0@0`,
				`consumer-producer wrote welcomes/0@0 "welcome, ada" ` + tc.header + ` claims `,
			}
			if len(lines) != len(want) {
				t.Fatalf("got %d lines, want %d:\n%s", len(lines), len(want), out.String())
			}
			for i := range want {
				if !strings.HasPrefix(lines[i], want[i]) {
					t.Errorf("line %d = %q, want prefix %q", i, lines[i], want[i])
				}
			}
			// The welcome claims the profile it consumed and, through it,
			// the signup.
			if !strings.Contains(lines[2], "signups/0@0") || !strings.Contains(lines[2], "profiles/0@0") {
				t.Errorf("welcome does not claim its causes: %q", lines[2])
			}
		})
	}
}
