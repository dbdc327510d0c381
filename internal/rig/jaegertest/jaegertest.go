// Package jaegertest starts a real Jaeger for the tracing test tier (#36):
// the all-in-one binary of Jaeger v1.76.0 with in-memory storage, its OTLP
// receiver and its query API on free 127.0.0.1 ports.
//
// The tier is off unless PARSLEY_JAEGER names the binary; .ci/run builds it
// (docs/testing.md, "The Jaeger tier"):
//
//	go mod download -json github.com/jaegertracing/jaeger@v1.76.0   # its Dir
//	cd <Dir copy> && go build -o /usr/local/bin/jaeger-all-in-one ./cmd/all-in-one
//
// (go install refuses the module: its go.mod has a replace directive).
// PARSLEY_JAEGER_UI, if set, is a directory of built jaeger-ui assets
// served as the query UI (the binary built from the module embeds none).
package jaegertest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Env is the variable that enables the tier: the all-in-one binary's path.
const Env = "PARSLEY_JAEGER"

// UIEnv optionally names a directory of built jaeger-ui assets.
const UIEnv = "PARSLEY_JAEGER_UI"

// Jaeger is a running all-in-one.
type Jaeger struct {
	// OTLPHTTP is the OTLP/HTTP receiver's host:port (traces go to
	// http://OTLPHTTP/v1/traces).
	OTLPHTTP string
	// Query is the query service's base URL (API and UI).
	Query string
	cmd   *exec.Cmd
	done  chan error
}

// Start starts Jaeger for t, or skips t when the tier is off. t's cleanup
// stops it.
func Start(t testing.TB) *Jaeger {
	t.Helper()
	bin := os.Getenv(Env)
	if bin == "" {
		t.Skipf("the Jaeger tier is off: set %s to the all-in-one binary (docs/testing.md)", Env)
	}
	j, err := start(bin, os.Getenv(UIEnv))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Stop)
	return j
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func start(bin, ui string) (*Jaeger, error) {
	addr := make(map[string]string)
	for _, k := range []string{"collector.otlp.http", "collector.otlp.grpc", "collector.http-server",
		"collector.grpc-server", "query.http-server", "query.grpc-server", "admin.http"} {
		p, err := freePort()
		if err != nil {
			return nil, err
		}
		addr[k] = "127.0.0.1:" + strconv.Itoa(p)
	}
	args := []string{"--collector.otlp.enabled=true"}
	for k, a := range addr {
		args = append(args, "--"+k+".host-port="+a)
	}
	if ui != "" {
		args = append(args, "--query.static-files="+ui)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "SPAN_STORAGE_TYPE=memory", "COLLECTOR_ZIPKIN_HOST_PORT=")
	log, err := os.CreateTemp("", "jaeger-*.log")
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("jaegertest: start %s: %w", bin, err)
	}
	j := &Jaeger{OTLPHTTP: addr["collector.otlp.http"], Query: "http://" + addr["query.http-server"], cmd: cmd, done: make(chan error, 1)}
	go func() { j.done <- cmd.Wait() }()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-j.done:
			b, _ := os.ReadFile(log.Name())
			return nil, fmt.Errorf("jaegertest: %s exited (%v):\n%s", bin, err, tail(b))
		case <-time.After(200 * time.Millisecond):
		}
		if ready(j.Query+"/api/services") && ready("http://"+addr["admin.http"]+"/") {
			return j, nil
		}
	}
	j.Stop()
	b, _ := os.ReadFile(log.Name())
	return nil, fmt.Errorf("jaegertest: not ready within 60s:\n%s", tail(b))
}

func tail(b []byte) string {
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

func ready(u string) bool {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(u)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Stop kills Jaeger and waits for it.
func (j *Jaeger) Stop() {
	if j.cmd.Process == nil {
		return
	}
	_ = j.cmd.Process.Kill()
	select {
	case <-j.done:
	case <-time.After(10 * time.Second):
	}
}

// Span is a span as the query API returns it (the fields tests read).
type Span struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64 `json:"startTime"` // microseconds since the epoch
	Duration  int64 `json:"duration"`  // microseconds
	Tags      []struct {
		Key   string `json:"key"`
		Type  string `json:"type"`
		Value any    `json:"value"`
	} `json:"tags"`
}

// Tag returns the span's tag key as a string ("" if absent).
func (s *Span) Tag(key string) string {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value)
		}
	}
	return ""
}

// Trace returns the spans of the trace with the hex ID id, polling until it
// has at least min spans or ctx ends.
func (j *Jaeger) Trace(ctx context.Context, id string, min int) ([]Span, error) {
	var last error
	for {
		spans, err := j.trace(ctx, id)
		if err == nil && len(spans) >= min {
			return spans, nil
		}
		if err != nil {
			last = err
		} else {
			last = fmt.Errorf("trace %s has %d spans, want %d", id, len(spans), min)
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func (j *Jaeger) trace(ctx context.Context, id string) ([]Span, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.Query+"/api/traces/"+url.PathEscape(strings.ToLower(id)), nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("jaegertest: GET /api/traces/%s: %s: %s", id, resp.Status, b)
	}
	var body struct {
		Data []struct {
			Spans []Span `json:"spans"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &body); err != nil {
		return nil, fmt.Errorf("jaegertest: decode trace %s: %w", id, err)
	}
	var out []Span
	for _, d := range body.Data {
		out = append(out, d.Spans...)
	}
	return out, nil
}
