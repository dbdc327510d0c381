package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/testcert"
)

// TestCertReloaderFollowsRenewals: a renewed certificate is served from
// the next handshake, and a half-written renewal keeps the last good one.
func TestCertReloaderFollowsRenewals(t *testing.T) {
	first, err := testcert.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	second, err := testcert.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cert, key := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	install := func(f testcert.Files, at time.Time) {
		t.Helper()
		for src, dst := range map[string]string{f.ServerCert: cert, f.ServerKey: key} {
			b, err := os.ReadFile(src)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(dst, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(dst, at, at); err != nil {
				t.Fatal(err)
			}
		}
	}
	t0 := time.Now().Add(-time.Hour)
	install(first, t0)
	r := &certReloader{certFile: cert, keyFile: key}
	c1, err := r.load()
	if err != nil {
		t.Fatal(err)
	}
	served := func() []byte {
		t.Helper()
		c, err := r.get(nil)
		if err != nil || c == nil {
			t.Fatalf("get: %v", err)
		}
		return c.Certificate[0]
	}
	if !bytes.Equal(served(), c1.Certificate[0]) {
		t.Fatal("serves another certificate than the one loaded")
	}
	install(second, t0.Add(time.Minute))
	renewed := served()
	if bytes.Equal(renewed, c1.Certificate[0]) {
		t.Fatal("the renewed certificate is not served")
	}
	if err := os.WriteFile(cert, []byte("half written"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chtimes(cert, t0.Add(2*time.Minute), t0.Add(2*time.Minute))
	if !bytes.Equal(served(), renewed) {
		t.Fatal("a broken renewal replaced the last good certificate")
	}
}
