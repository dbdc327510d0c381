package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/obstest"
	"github.com/parsley-go/parsley/observer"
	"github.com/parsley-go/parsley/observer/web"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/bcrypt"
)

const testToken = "0123456789abcdef-ci-bot-token"

// accessFiles writes a tokens file naming ci-bot and a users file with
// alice (password "wonderland").
func accessFiles(t *testing.T) (tokens, users string) {
	t.Helper()
	dir := t.TempDir()
	tokens, users = filepath.Join(dir, "tokens"), filepath.Join(dir, "users")
	hash, err := bcrypt.GenerateFromPassword([]byte("wonderland"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokens, []byte("# who may acknowledge\nci-bot "+testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(users, []byte("alice:"+string(hash)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return tokens, users
}

// syncBuffer is a log sink the server may write from its goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func post(t *testing.T, url string, body string, hdr map[string]string) (int, http.Header, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestAcknowledgeNeedsCredentials: acknowledging is refused — and changes
// nothing — without an access configuration, without credentials, with
// wrong ones, from another site or as a form; with a token or a user it
// records and logs who, and the finding leaves the open counts.
func TestAcknowledgeNeedsCredentials(t *testing.T) {
	ctx := obstest.Ctx(t)
	c := broker.New(t)
	b := obstest.Builder(t, c)
	if _, err := b.Faulty(ctx); err != nil {
		t.Fatal(err)
	}
	st, o := obstest.Scan(t, ctx, c, observer.Config{})
	fs, err := o.Findings(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var gap, regress observer.Finding
	for _, f := range fs {
		switch f.Code {
		case observer.CodeSequenceGap:
			gap = f
		case observer.CodeStampRegression:
			regress = f
		}
	}
	tokens, users := accessFiles(t)
	access, err := web.LoadAccess(tokens, users)
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	newServer := func(a *web.Access) (*httptest.Server, *prometheus.Registry) {
		reg := prometheus.NewRegistry()
		reg.MustRegister(o.Collector())
		h, err := web.New(web.Config{Store: st, Findings: o.Findings, Gatherer: reg, Health: o.Health, Access: a,
			Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv, reg
	}
	closed, _ := newServer(nil)
	srv, _ := newServer(access)
	ackURL := func(s *httptest.Server, id int64) string { return fmt.Sprintf("%s/api/findings/%d/ack", s.URL, id) }
	body := `{"reason": "known: replayed from a backup"}`
	jsonTok := map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + testToken}
	unchanged := func(what string) {
		t.Helper()
		f, err := st.Finding(context.Background(), gap.ID)
		h, _ := st.History(context.Background(), gap.ID)
		if err != nil || f.State != observer.StateOpen || f.Ack != nil || len(h) != 0 {
			t.Errorf("%s changed the finding: %q %+v, history %+v (%v)", what, f.State, f.Ack, h, err)
		}
	}
	for _, tc := range []struct {
		name string
		srv  *httptest.Server
		body string
		hdr  map[string]string
		code int
	}{
		{"no access configured", closed, body, jsonTok, 403},
		{"no credentials", srv, body, map[string]string{"Content-Type": "application/json"}, 401},
		{"wrong token", srv, body, map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + strings.Repeat("x", 29)}, 401},
		{"wrong password", srv, body, map[string]string{"Content-Type": "application/json", "Authorization": basic("alice", "mirror")}, 401},
		{"unknown user", srv, body, map[string]string{"Content-Type": "application/json", "Authorization": basic("mallory", "wonderland")}, 401},
		{"cross-site origin", srv, body, map[string]string{"Content-Type": "application/json", "Authorization": basic("alice", "wonderland"), "Origin": "https://evil.example"}, 403},
		{"cross-site fetch", srv, body, map[string]string{"Content-Type": "application/json", "Authorization": basic("alice", "wonderland"), "Sec-Fetch-Site": "cross-site"}, 403},
		{"a form post", srv, "reason=x", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Authorization": basic("alice", "wonderland")}, 403},
		{"no reason", srv, `{"reason": " "}`, jsonTok, 400},
		{"not JSON", srv, `reason`, jsonTok, 400},
	} {
		code, hdr, msg := post(t, ackURL(tc.srv, gap.ID), tc.body, tc.hdr)
		if code != tc.code || strings.TrimSpace(msg) == "" {
			t.Errorf("%s: %d %q, want %d with a message", tc.name, code, msg, tc.code)
		}
		// A user and password are asked for unless a token was sent.
		if code == 401 && strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Basic ") == strings.HasPrefix(tc.hdr["Authorization"], "Bearer ") {
			t.Errorf("%s: 401 with challenge %q", tc.name, hdr.Get("WWW-Authenticate"))
		}
		unchanged(tc.name)
	}
	if code, _, _ := post(t, ackURL(srv, 999999), body, jsonTok); code != 404 {
		t.Errorf("unknown finding: %d, want 404", code)
	}
	if !strings.Contains(logs.String(), "acknowledgement refused") {
		t.Errorf("refusals are not logged:\n%s", logs.String())
	}

	code, _, msg := post(t, ackURL(srv, gap.ID), body, jsonTok)
	var acked observer.Finding
	if err := json.Unmarshal([]byte(msg), &acked); code != 200 || err != nil || acked.State != observer.StateAcknowledged || acked.Ack.By != "ci-bot" {
		t.Fatalf("acknowledge with the token: %d %v %s", code, err, msg)
	}
	// Same-origin browser requests pass.
	code, _, msg = post(t, ackURL(srv, regress.ID), `{"reason": "restored"}`, map[string]string{
		"Content-Type": "application/json", "Authorization": basic("alice", "wonderland"),
		"Origin": srv.URL, "Sec-Fetch-Site": "same-origin"})
	if err := json.Unmarshal([]byte(msg), &acked); code != 200 || err != nil || acked.Ack == nil || acked.Ack.By != "alice" {
		t.Fatalf("acknowledge as alice from the UI: %d %v %s", code, err, msg)
	}
	if l := logs.String(); !strings.Contains(l, `msg="finding acknowledged"`) || !strings.Contains(l, "by=ci-bot") || !strings.Contains(l, "by=alice") {
		t.Errorf("acknowledgements are not logged with the identity:\n%s", l)
	}
	_, page := get(t, srv, fmt.Sprintf("/api/findings/%d", gap.ID))
	var detail struct {
		Finding observer.Finding
		History []observer.Event
	}
	if err := json.Unmarshal([]byte(page), &detail); err != nil || len(detail.History) != 1 || detail.History[0].By != "ci-bot" || !strings.Contains(detail.History[0].Why, "backup") {
		t.Errorf("/api/findings/%d: %v %s", gap.ID, err, page)
	}
	// Gone from the open list and the metrics, there under acknowledged.
	var open, ackd []observer.Finding
	_, page = get(t, srv, "/api/findings")
	json.Unmarshal([]byte(page), &open)
	_, page = get(t, srv, "/api/findings?state=acknowledged")
	json.Unmarshal([]byte(page), &ackd)
	if len(open) != len(fs)-2 || len(ackd) != 2 {
		t.Errorf("%d open and %d acknowledged findings, want %d and 2", len(open), len(ackd), len(fs)-2)
	}
	if _, m := get(t, srv, "/metrics"); !strings.Contains(m, `parsley_observer_findings_by_severity{severity="error"} 2`) {
		t.Errorf("/metrics after acknowledging two of four errors:\n%s", m)
	}
}

func basic(user, pass string) string {
	r, _ := http.NewRequest("GET", "/", nil)
	r.SetBasicAuth(user, pass)
	return r.Header.Get("Authorization")
}

func TestLoadAccessRefusesBadFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct{ name, tokens, users string }{
		{"short token", write("t1", "bot short\n"), ""},
		{"plain password", "", write("u1", "alice:wonderland\n")},
		{"no colon", "", write("u2", "alice\n")},
		{"only comments", write("t2", "# nothing\n\n"), ""},
		{"missing file", filepath.Join(dir, "nope"), ""},
	} {
		if _, err := web.LoadAccess(tc.tokens, tc.users); err == nil || !strings.Contains(err.Error(), dir) && tc.name != "only comments" {
			t.Errorf("%s: %v, want an error naming the file", tc.name, err)
		} else if !errorsIs(err, web.ErrAccessFile) {
			t.Errorf("%s: %v does not wrap ErrAccessFile", tc.name, err)
		}
	}
	if a, err := web.LoadAccess("", ""); a != nil || err != nil {
		t.Errorf("no files: %v %v, want nil (writes refused)", a, err)
	}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
