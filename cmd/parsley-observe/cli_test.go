package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/parsley-go/parsley/headers"
	_ "modernc.org/sqlite"
)

// TestReadCommandsLeaveAForeignFileUnchanged: explain and graph open their
// store read-only and refuse, byte for byte untouched, a SQLite database
// that is not an observer store and a file that is not a database.
func TestReadCommandsLeaveAForeignFileUnchanged(t *testing.T) {
	dir := t.TempDir()
	foreign := filepath.Join(dir, "app.db")
	db, err := sql.Open("sqlite", foreign)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE accounts(id INTEGER PRIMARY KEY, owner TEXT); INSERT INTO accounts(owner) VALUES ('ada'), ('grace')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	text := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(text, []byte("not a database at all, but long enough to have a header-sized prefix\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, says string }{
		{foreign, "is a SQLite database but not an observer store"},
		{text, "is not a SQLite database"},
	} {
		before, err := os.ReadFile(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{
			{"explain", "--db", tc.path, "orders/0@0"},
			{"graph", "--db", tc.path, "--format", "json", "orders/0@0"},
		} {
			_, errOut, code := run(t, nil, args...)
			if code != 2 || !strings.Contains(errOut, tc.says) {
				t.Errorf("%v: exit %d, stderr %q; want 2 saying %q", args, code, errOut, tc.says)
			}
		}
		after, err := os.ReadFile(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(before, after) {
			t.Errorf("%s changed: %d bytes before, %d after", tc.path, len(before), len(after))
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if n := e.Name(); strings.HasSuffix(n, "-wal") || strings.HasSuffix(n, "-shm") || strings.HasSuffix(n, "-journal") {
				t.Errorf("a read command left %s beside the file", n)
			}
		}
	}
}

// TestUsageErrorsExitTwo: every usage error exits 2, naming what is wrong.
func TestUsageErrorsExitTwo(t *testing.T) {
	db := filepath.Join(t.TempDir(), "none.db")
	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"explain", "--no-such-flag", "x/0@0"}, "no-such-flag"},
		{[]string{"no-such-command"}, "no-such-command"},
		{[]string{"explain", "--db", db, "--depth", "0", "x/0@0"}, "--depth 0"},
		{[]string{"explain", "--db", db, "--depth", "-1", "x/0@0"}, "--depth -1"},
		{[]string{"graph", "--db", db, "--limit", "0", "x/0@0"}, "--limit 0"},
		{[]string{"graph", "--db", db, "--direction", "sideways", "x/0@0"}, "--direction"},
		{[]string{"explain", "--db", db, "x/0@0"}, "no such file"},
		{[]string{"explain", "x/0@0"}, "db"},
	} {
		_, errOut, code := run(t, nil, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.says) {
			t.Errorf("%v: exit %d, stderr %q; want 2 mentioning %q", tc.args, code, errOut, tc.says)
		}
	}
}

func TestVersionFlag(t *testing.T) {
	out, _, code := run(t, nil, "--version")
	if code != 0 || !strings.HasPrefix(out, "parsley-observe ") || !strings.Contains(out, "(go ") {
		t.Errorf("--version: exit %d, %q", code, out)
	}
}

// TestDecodeAcceptsHexWithSpaces: a stamp pasted as the docs print it.
func TestDecodeAcceptsHexWithSpaces(t *testing.T) {
	var clk headers.Clock
	ch := headers.Channel{Topic: headers.TopicID{9}, Partition: 2}
	clk.SetOffset(ch, 41)
	vc, err := headers.EncodeVC(&clk)
	if err != nil {
		t.Fatal(err)
	}
	h := hex.EncodeToString(vc)
	var spaced strings.Builder
	for i := 0; i < len(h); i += 4 {
		spaced.WriteString(h[i:min(i+4, len(h))] + " ")
	}
	out, errOut, code := run(t, nil, "decode", spaced.String())
	if code != 0 || !strings.Contains(out, "≤ 41") {
		t.Errorf("decode %q: exit %d\n%s%s", spaced.String(), code, out, errOut)
	}
}

// TestDecodeCoordNamesAnUnknownTopic: a topic that does not exist is
// blamed on itself, not on the last stable offset.
func TestDecodeCoordNamesAnUnknownTopic(t *testing.T) {
	c, _ := newBuilder(t)
	_, errOut, code := run(t, nil, "decode", "--brokers", c.Addrs()[0], "--coord", "nosuch/0@0")
	if code != 2 || !strings.Contains(errOut, `no topic "nosuch"`) || strings.Contains(errOut, "stable offset") {
		t.Errorf("decode --coord nosuch/0@0: exit %d: %s", code, errOut)
	}
}

// TestGraphBothDirections: --direction both draws ancestry and
// descendants in one graph.
func TestGraphBothDirections(t *testing.T) {
	ctx := context.Background()
	c, b := newBuilder(t)
	if _, err := b.Clean(ctx, 3); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "obs.db")
	if _, errOut, code := run(t, nil, "scan", "--brokers", c.Addrs()[0], "--topics", "orders,shipments", "--db", db); code != 0 {
		t.Fatalf("scan: exit %d: %s", code, errOut)
	}
	count := func(dir string) int {
		out, errOut, code := run(t, nil, "graph", "--db", db, "--direction", dir, "--format", "dot", "shipments/0@1")
		if code != 0 {
			t.Fatalf("graph --direction %s: exit %d: %s", dir, code, errOut)
		}
		return strings.Count(out, "->")
	}
	up, down, both := count("ancestry"), count("descendants"), count("both")
	if up == 0 || down == 0 || both != up+down {
		t.Errorf("edges: ancestry %d, descendants %d, both %d; want both = ancestry + descendants, each non-zero", up, down, both)
	}
}

// TestExplainSpeaksNames: explain names the stage task that sent a record
// and the topic in its not-found message, never their UUIDs.
func TestExplainSpeaksNames(t *testing.T) {
	ctx := context.Background()
	c, b := newBuilder(t)
	if _, err := b.Faulty(ctx); err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "obs.db")
	if _, errOut, code := run(t, nil, "scan", "--brokers", c.Addrs()[0], "--pattern", ".*", "--db", db); code != 1 {
		t.Fatalf("scan of the faulty topology: exit %d, want 1: %s", code, errOut)
	}
	uuid := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	out, errOut, code := run(t, nil, "explain", "--db", db, "--descendants", "up/0@0")
	if code != 0 || !strings.Contains(out, "sender shop/retired/0 seq 1") || uuid.MatchString(out) {
		t.Errorf("explain --descendants up/0@0: exit %d\n%s%s", code, out, errOut)
	}
	_, errOut, code = run(t, nil, "explain", "--db", db, "gap/0@9")
	if code != 2 || !strings.Contains(errOut, "gap/0@9") || uuid.MatchString(errOut) {
		t.Errorf("explain gap/0@9 (not stored): exit %d: %s", code, errOut)
	}
}
