package web_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/obstest"
	"github.com/parsley-go/parsley/observer"
	"github.com/parsley-go/parsley/observer/web"
)

// FuzzServerNeverFails500 sends arbitrary coordinates and query parameters
// to every route: a malformed request is the client's fault (400) or names
// nothing (404), never a server error.
func FuzzServerNeverFails500(f *testing.F) {
	ctx := obstest.Ctx(f)
	c := broker.New(f)
	b := obstest.Builder(f, c)
	if err := b.Create(ctx, 1, "t"); err != nil {
		f.Fatal(err)
	}
	first, err := b.Produce(ctx, "t", 0, nil)
	if err != nil {
		f.Fatal(err)
	}
	var s headers.Stamp
	s.Clock.SetOffset(first.Channel, first.Offset)
	if _, err := b.Stamped(ctx, "t", 0, &s); err != nil {
		f.Fatal(err)
	}
	st, _ := obstest.Scan(f, ctx, c, observer.Config{})
	srv, err := web.New(web.Config{Store: st})
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range [][3]string{{"t/0@1", "depth", "3"}, {"t/0@x", "limit", "-1"}, {"0f000000-0000-0000-0000-000000000000/0@1", "direction", "up"}, {"", "code", "x"}} {
		f.Add(seed[0], seed[1], seed[2])
	}
	routes := []string{"/record/", "/api/records/", "/api/graph/"}
	f.Fuzz(func(t *testing.T, coord, key, value string) {
		q := url.Values{key: {value}}.Encode()
		paths := []string{"/?" + q, "/api/findings?" + q, "/topics?" + q}
		for _, r := range routes {
			paths = append(paths, r+url.PathEscape(coord)+"?"+q)
		}
		for _, p := range paths {
			req, err := http.NewRequest("GET", "http://x"+p, nil)
			if err != nil {
				continue // not a request a client could send
			}
			rec := httptest.NewRecorder()
			srv.ServeHTTP(rec, req)
			if rec.Code >= 500 {
				t.Fatalf("GET %s: %d %s", p, rec.Code, rec.Body.String())
			}
		}
	})
}
