package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/obstest"
	"github.com/parsley-go/parsley/observer"
	"github.com/parsley-go/parsley/observer/web"
)

// TestShardedServer: a shard's server sends a reader of a record another
// shard reads to that shard (once: a request it sent on is answered
// where it lands), lists the group at /api/shards and on the topics page,
// and acknowledges through the observer, which tells the group.
func TestShardedServer(t *testing.T) {
	ctx := obstest.Ctx(t)
	c := broker.New(t)
	b := obstest.Builder(t, c)
	if _, err := b.Faulty(ctx); err != nil {
		t.Fatal(err)
	}
	st, o := obstest.Scan(t, ctx, c, observer.Config{})
	gap := b.Ch("gap", 0)
	tokens, users := accessFiles(t)
	access, err := web.LoadAccess(tokens, users)
	if err != nil {
		t.Fatal(err)
	}
	var acked []int64
	s, err := web.New(web.Config{Store: st, Findings: o.Findings,
		Locate: func(_ context.Context, ch headers.Channel) (string, bool) {
			if ch == gap {
				return "http://other.example:8080", false
			}
			return "", true
		},
		Shards: func(context.Context) ([]observer.Shard, error) {
			return []observer.Shard{{Instance: "a", URL: "http://a.example", Self: true, Live: true, Partitions: []string{"base/0"}},
				{Instance: "b", URL: "http://other.example:8080", Live: false, Partitions: []string{"gap/0"}}}, nil
		},
		Acknowledge: func(ctx context.Context, id int64, by, reason string) (observer.Finding, error) {
			acked = append(acked, id)
			return st.Acknowledge(ctx, id, by, reason)
		},
		Access: access})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	defer srv.Close()
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"/record/gap/0@1", "/api/records/gap/0@1?depth=2", "/api/graph/gap/0@1?format=dot"} {
		resp, err := noFollow.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusTemporaryRedirect || !strings.HasPrefix(loc, "http://other.example:8080"+strings.SplitN(path, "?", 2)[0]+"?") ||
			!strings.Contains(loc, "hop=1") {
			t.Errorf("GET %s: %d to %q; want 307 to the other shard, marked as sent on", path, resp.StatusCode, loc)
		}
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		if code, body := get(t, srv, path+sep+"hop=1"); code != 200 {
			t.Errorf("GET %s sent on by a shard: %d, want it answered here\n%.300s", path, code, body)
		}
	}
	if code, _ := get(t, srv, "/record/base/0@1"); code != 200 {
		t.Errorf("a record of a channel read here: %d", code)
	}
	code, body := get(t, srv, "/api/shards")
	var shards []observer.Shard
	if err := json.Unmarshal([]byte(body), &shards); code != 200 || err != nil || len(shards) != 2 || shards[1].Partitions[0] != "gap/0" {
		t.Errorf("/api/shards: %d %v %s", code, err, body)
	}
	if code, body := get(t, srv, "/topics"); code != 200 || !strings.Contains(body, `id="shards"`) || !strings.Contains(body, `data-shard="b"`) {
		t.Errorf("topics page: %d, no shards table:\n%.500s", code, body)
	}
	fs, err := st.Findings(ctx, nil)
	if err != nil || len(fs) == 0 {
		t.Fatal(fs, err)
	}
	code, _, body = post(t, fmt.Sprintf("%s/api/findings/%d/ack", srv.URL, fs[0].ID), `{"reason": "known"}`,
		map[string]string{"Content-Type": "application/json", "Authorization": "Bearer " + testToken})
	if code != 200 || len(acked) != 1 || acked[0] != fs[0].ID {
		t.Errorf("acknowledge: %d %s; the observer's Acknowledge saw %v", code, body, acked)
	}
}
