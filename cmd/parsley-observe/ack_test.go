package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/parsley-go/parsley/observer"
)

// TestAckCommand: `parsley-observe ack` acknowledges through serve's API
// with a token the server's --ack-tokens-file names; without credentials,
// with a wrong token, or against a server that names nobody, it exits 2
// and the finding stays open. Bad flags are refused before serve opens
// its store.
func TestAckCommand(t *testing.T) {
	ctx := context.Background()
	c, b := newBuilder(t)
	if _, err := b.Faulty(ctx); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	tokens, tokenFile, wrong := filepath.Join(dir, "tokens"), filepath.Join(dir, "token"), filepath.Join(dir, "wrong")
	for p, text := range map[string]string{tokens: "oncall 0123456789abcdef0123\n", tokenFile: "0123456789abcdef0123\n", wrong: "fedcba98765432100000\n"} {
		if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Flag errors come before any file is created.
	db := filepath.Join(dir, "obs.db")
	for _, args := range [][]string{
		{"--ack-tokens-file", filepath.Join(dir, "missing")},
		{"--closed-retention", "-1h"},
	} {
		_, errOut, code := run(t, nil, append([]string{"serve", "--brokers", c.Addrs()[0], "--pattern", ".*", "--db", db, "--listen", "127.0.0.1:0"}, args...)...)
		if code != 2 || errOut == "" {
			t.Errorf("serve %v: exit %d %q, want 2 with a message", args, code, errOut)
		}
		if _, err := os.Stat(db); err == nil {
			t.Errorf("serve %v created %s before refusing its flags", args, db)
		}
	}
	url := startServing(t, "serve", "--brokers", c.Addrs()[0], "--pattern", ".*", "--db", db, "--listen", "127.0.0.1:0", "--ack-tokens-file", tokens)
	closed := startServing(t, "serve", "--brokers", c.Addrs()[0], "--pattern", ".*", "--db", filepath.Join(dir, "closed.db"), "--listen", "127.0.0.1:0")
	var fs []observer.Finding
	getJSON(t, url+"api/findings?code=sequence-gap", &fs)
	if len(fs) != 1 {
		t.Fatalf("%d sequence gaps, want 1", len(fs))
	}
	id := strconv.FormatInt(fs[0].ID, 10)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no reason", []string{"ack", "--url", url, "--token-file", tokenFile, id}, "--reason"},
		{"no credentials", []string{"ack", "--url", url, "--reason", "known", id}, "needs credentials"},
		{"wrong token", []string{"ack", "--url", url, "--reason", "known", "--token-file", wrong, id}, "401"},
		{"server names nobody", []string{"ack", "--url", closed, "--reason", "known", "--token-file", tokenFile, id}, "403"},
		{"no such finding", []string{"ack", "--url", url, "--reason", "known", "--token-file", tokenFile, "99999"}, "404"},
		{"not an id", []string{"ack", "--url", url, "--reason", "known", "--token-file", tokenFile, "gap"}, "finding id"},
	} {
		_, errOut, code := run(t, nil, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d %q, want 2 mentioning %q", tc.name, code, errOut, tc.want)
		}
		getJSON(t, url+"api/findings?code=sequence-gap", &fs)
		if len(fs) != 1 || fs[0].State != observer.StateOpen {
			t.Errorf("%s changed the finding: %+v", tc.name, fs)
		}
	}
	out, errOut, code := run(t, nil, "ack", "--url", url, "--reason", "sends lost in the 3 May outage", "--token-file", tokenFile, "#"+id)
	if code != 0 || !strings.Contains(out, "acknowledged by oncall") {
		t.Fatalf("ack: exit %d\n%s%s", code, out, errOut)
	}
	getJSON(t, url+"api/findings?code=sequence-gap&state=acknowledged", &fs)
	if len(fs) != 1 || fs[0].Ack == nil || fs[0].Ack.By != "oncall" || !strings.Contains(fs[0].Ack.Reason, "outage") {
		t.Errorf("after ack: %+v", fs)
	}
}
