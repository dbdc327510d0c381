package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
)

// secureConfig writes a config file that reaches the real cluster's
// SASL_SSL listener with mech, plus the extra lines.
func secureConfig(t *testing.T, s *broker.SecureListener, mech string, password string, extra ...string) string {
	t.Helper()
	dir := t.TempDir()
	lines := []string{
		fmt.Sprintf("brokers: [%s]", strings.Join(s.Addrs, ", ")),
		"tls-ca: " + s.CA,
		"tls-cert: " + s.ClientCert,
		"tls-key: " + s.ClientKey,
		"sasl-mechanism: " + mech,
	}
	if mech == "OAUTHBEARER" {
		lines = append(lines, "sasl-token-file: "+s.TokenFile)
	} else {
		pw := filepath.Join(dir, "password")
		if err := os.WriteFile(pw, []byte(password+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, "sasl-user: "+s.Users[mech].Name, "sasl-password-file: "+pw)
	}
	p := filepath.Join(dir, "observe.yaml")
	if err := os.WriteFile(p, []byte(strings.Join(append(lines, extra...), "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSecureScanAndServeFromAConfigFileAlone runs scan and serve against
// the real cluster's SASL_SSL listener (mutual TLS and SASL) with nothing
// on the command line but --config: scan reads the records with each
// mechanism, a wrong password is refused, and serve tails the topics and
// reports ready.
func TestSecureScanAndServeFromAConfigFileAlone(t *testing.T) {
	s := broker.Secure(t)
	ctx := context.Background()
	_, b := newBuilder(t)
	if _, err := b.Clean(ctx, 3); err != nil {
		t.Fatal(err)
	}
	for _, mech := range []string{"SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN", "OAUTHBEARER"} {
		t.Run(mech, func(t *testing.T) {
			db := filepath.Join(t.TempDir(), "obs.db")
			cfg := secureConfig(t, s, mech, s.Users[mech].Password, "topics: [orders, shipments]", "db: "+db, "timeout: 60s")
			out, errOut, code := run(t, nil, "scan", "--config", cfg)
			if code != 0 || !strings.Contains(out, "0 findings") {
				t.Fatalf("scan exited %d:\n%s%s", code, out, errOut)
			}
			out, errOut, code = run(t, nil, "explain", "--config", cfg, "shipments/0@2")
			if code != 0 || !strings.Contains(out, "orders/0@0") {
				t.Errorf("explain over the scanned store exited %d:\n%s%s", code, out, errOut)
			}
		})
	}
	t.Run("wrong password", func(t *testing.T) {
		cfg := secureConfig(t, s, "SCRAM-SHA-512", "not-the-password", "topics: [orders]", "timeout: 30s")
		out, errOut, code := run(t, nil, "scan", "--config", cfg)
		if code != 2 {
			t.Errorf("scan with a wrong password exited %d, want 2:\n%s%s", code, out, errOut)
		}
	})
	t.Run("no client certificate", func(t *testing.T) {
		cfg := secureConfig(t, s, "SCRAM-SHA-512", s.Users["SCRAM-SHA-512"].Password, "topics: [orders]", "timeout: 30s")
		out, errOut, code := run(t, nil, "scan", "--config", cfg, "--tls-cert", "", "--tls-key", "")
		if code != 2 {
			t.Errorf("scan without the client certificate the listener requires exited %d, want 2:\n%s%s", code, out, errOut)
		}
	})
	t.Run("serve", func(t *testing.T) {
		cfg := secureConfig(t, s, "SCRAM-SHA-512", s.Users["SCRAM-SHA-512"].Password,
			"pattern: '^(orders|shipments)$'", "db: "+filepath.Join(t.TempDir(), "obs.db"), "listen: 127.0.0.1:0", "refresh: 1s")
		url := startServing(t, "serve", "--config", cfg)
		waitUntil(t, 60*time.Second, "serve stores the 6 records and reports ready", func() bool {
			var ts []struct{ Records int }
			getJSON(t, url+"api/topics", &ts)
			total := 0
			for _, x := range ts {
				total += x.Records
			}
			code, _ := fetch(t, url+"readyz")
			return total == 6 && code == 200
		})
	})
}
