package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/testcert"
)

// TestServeRefusesBadFlagsBeforeCreatingFiles: serve checks every flag,
// and binds its listener, before it creates the store, so each mistake
// exits 2 naming the flag and leaves the working directory empty.
func TestServeRefusesBadFlagsBeforeCreatingFiles(t *testing.T) {
	certs, err := testcert.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	base := []string{"serve", "--brokers", "127.0.0.1:1", "--topics", "t", "--listen", "127.0.0.1:0"}
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--listen", "nonsense"}, "--listen nonsense"},
		{[]string{"--max-age", "-5s"}, "--max-age -5s"},
		{[]string{"--max-records", "-1"}, "--max-records -1"},
		{[]string{"--refresh", "0s"}, "--refresh 0s"},
		{[]string{"--from", "yesterday"}, "--from"},
		{[]string{"--pattern", "("}, "--pattern"},
		{[]string{"--log-format", "xml"}, "--log-format"},
		{[]string{"--tls-cert", certs.ClientCert}, "--tls-key"},
		{[]string{"--tls-ca", "/no/such/ca.pem"}, "--tls-ca"},
		{[]string{"--sasl-mechanism", "SCRAM-SHA-512", "--sasl-user", "u"}, "--sasl-password"},
		{[]string{"--http-tls-cert", certs.ServerCert}, "--http-tls-key"},
		{[]string{"--http-tls-cert", certs.ServerCert, "--http-tls-key", certs.ClientKey}, "--http-tls-cert"},
		{[]string{"--config", "/no/such/observe.yaml"}, "--config"},
	} {
		dir := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		cmd := exec.CommandContext(ctx, bin, append(base, tc.args...)...)
		cmd.Dir = dir
		var errb strings.Builder
		cmd.Stderr = &errb
		err := cmd.Run()
		cancel()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(errb.String(), tc.says) || !strings.HasPrefix(errb.String(), "parsley-observe: ") {
			t.Errorf("%v: %v, stderr %q; want exit 2, \"parsley-observe: \" and %q", tc.args, err, errb.String(), tc.says)
		}
		if entries, _ := os.ReadDir(dir); len(entries) > 0 {
			t.Errorf("%v left %s in the working directory", tc.args, entries[0].Name())
		}
	}
}

// TestServeHTTPSWithProcessMetricsAndJSONLogs serves the UI over HTTPS
// from --http-tls-cert, answers /livez, /healthz and /readyz, exports the
// Go runtime, process and build-info families beside the observer's, and
// logs nothing but JSON records with --log-format json.
func TestServeHTTPSWithProcessMetricsAndJSONLogs(t *testing.T) {
	ctx := context.Background()
	c, b := newBuilder(t)
	if _, err := b.Clean(ctx, 2); err != nil {
		t.Fatal(err)
	}
	certs, err := testcert.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(certs.CA)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(pem)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}

	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, bin, "serve", "--brokers", c.Addrs()[0], "--pattern", "^(orders|shipments)$",
		"--db", filepath.Join(t.TempDir(), "obs.db"), "--listen", "127.0.0.1:0", "--log-format", "json",
		"--http-tls-cert", certs.ServerCert, "--http-tls-key", certs.ServerKey)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var url string
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "parsley-observe: serving "); ok {
			url = u
			break
		}
	}
	go io.Copy(io.Discard, stdout)
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cmd.Process.Signal(os.Interrupt)
		cmd.Wait()
	}
	defer stop()
	if !strings.HasPrefix(url, "https://127.0.0.1:") {
		stop()
		t.Fatalf("serve printed %q; want an https URL; stderr: %s", url, stderr.String())
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get(url + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	for _, p := range []string{"livez", "healthz"} {
		if code, body := get(p); code != 200 || body != "ok\n" {
			t.Errorf("/%s: %d %q", p, code, body)
		}
	}
	waitUntil(t, 20*time.Second, "/readyz answers 200", func() bool { code, _ := get("readyz"); return code == 200 })
	_, metrics := get("metrics")
	for _, family := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_resident_memory_bytes", "go_build_info", "parsley_observer_records_ingested_total"} {
		if !strings.Contains(metrics, "\n"+family) {
			t.Errorf("/metrics lacks %s", family)
		}
	}
	// Plain HTTP to the TLS listener is refused.
	if resp, err := http.Get("http" + strings.TrimPrefix(url, "https") + "livez"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Error("plain HTTP to the HTTPS listener answered 200")
		}
	}
	stop()
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatal("serve logged nothing")
	}
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec["command"] != "serve" || rec["level"] == nil {
			t.Errorf("stderr line is not a JSON log record of serve: %q", l)
		}
	}
}
