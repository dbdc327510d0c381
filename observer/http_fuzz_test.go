package observer

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/parsley-go/parsley/headers"
)

// FuzzServerNeverFails500 sends arbitrary coordinates and query parameters
// to every route: a malformed request is the client's fault (400) or names
// nothing (404), never a server error.
func FuzzServerNeverFails500(f *testing.F) {
	st, err := OpenStore(context.Background(), f.TempDir()+"/f.db")
	if err != nil {
		f.Fatal(err)
	}
	defer st.Close()
	w, err := newWriter(context.Background(), st)
	if err != nil {
		f.Fatal(err)
	}
	defer w.close()
	ch := headers.Channel{Topic: headers.TopicID{0xf}, Partition: 0}
	var s headers.Stamp
	s.Clock.SetOffset(ch, 0)
	hs, _ := headers.AppendStamp([]headers.Header(nil), &s, headers.DialectVC)
	if err := w.ingest(context.Background(), []incoming{{Channel: ch, Topic: "t", Offset: 0}, {Channel: ch, Topic: "t", Offset: 1, Headers: hs}}); err != nil {
		f.Fatal(err)
	}
	srv, err := NewServer(st, nil, nil)
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
