package view

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/parsley-go/parsley/internal/kafkahash"
	"github.com/parsley-go/parsley/internal/state"
	"github.com/parsley-go/parsley/stage"
)

// Get names the partition that owns the key while its replica catches up,
// answers once it is ready, and refuses a key of a partition the view does
// not replicate; the HTTP handler maps each to its status.
func TestGetNamesTheOwningPartition(t *testing.T) {
	v, err := New(Config{ApplicationID: "a", Stage: "s", Brokers: []string{"k:9092"}, Partitions: []int32{0, 1, 2}}, stage.String(), stage.String())
	if err != nil {
		t.Fatal(err)
	}
	const n = 4
	v.nparts = n
	var key, other string
	for i := 0; key == "" || other == ""; i++ {
		k := string(rune('a' + i))
		switch kafkahash.Partition([]byte(k), n) {
		case 2:
			key = k
		case 3:
			other = k
		}
	}
	for p := range int32(3) {
		r := newReplica(4)
		r.kv[state.FoldKey([]byte(key))], r.hwm = []byte(`x`), 10
		v.parts[p] = r
	}
	var nre *NotReadyError
	if _, _, err := v.Get(key); !errors.As(err, &nre) || nre.Partition != 2 || nre.Lag != 6 {
		t.Fatalf("Get(%q) while its partition catches up: %v; want a *NotReadyError naming partition 2, lag 6", key, err)
	}
	if _, _, err := v.Get(other); !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("Get(%q), owned by partition 3: %v; want ErrNotReplicated", other, err)
	}

	h, err := Handler(v, HandlerOptions[string]{})
	if err != nil {
		t.Fatal(err)
	}
	status := func(k string) (int, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/state/"+k, nil))
		return rec.Code, rec.Header().Get("Retry-After")
	}
	if code, retry := status(key); code != http.StatusServiceUnavailable || retry != RetryAfter {
		t.Fatalf("GET of a key whose partition is not ready = %d, Retry-After %q; want 503 with Retry-After", code, retry)
	}
	if code, _ := status(other); code != http.StatusMisdirectedRequest {
		t.Fatalf("GET of a key of another view's partition = %d; want 421", code)
	}

	v.parts[2].ready = true
	if s, ok, err := v.Get(key); err != nil || !ok || s != "x" {
		t.Fatalf("Get(%q) once ready = %q, %v, %v", key, s, ok, err)
	}
	if code, _ := status(key); code != http.StatusOK {
		t.Fatalf("GET once ready = %d; want 200", code)
	}
}
