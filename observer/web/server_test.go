package web_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/obsdemo"
	"github.com/parsley-go/parsley/internal/rig/obstest"
	"github.com/parsley-go/parsley/observer"
	"github.com/parsley-go/parsley/observer/web"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func get(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// writeKeys are the requests that change a cluster's data or membership.
var writeKeys = map[int16]bool{
	kmsg.Produce.Int16(): true, kmsg.OffsetCommit.Int16(): true, kmsg.CreateTopics.Int16(): true,
	kmsg.DeleteTopics.Int16(): true, kmsg.DeleteRecords.Int16(): true, kmsg.InitProducerID.Int16(): true,
	kmsg.AddPartitionsToTxn.Int16(): true, kmsg.EndTxn.Int16(): true, kmsg.TxnOffsetCommit.Int16(): true,
	kmsg.CreatePartitions.Int16(): true, kmsg.AlterConfigs.Int16(): true, kmsg.IncrementalAlterConfigs.Int16(): true,
	kmsg.JoinGroup.Int16(): true,
}

func TestServerAndReadOnly(t *testing.T) {
	broker.KfakeOnly(t, "watches every request the cluster receives through a kfake Control hook")
	ctx := obstest.Ctx(t)
	c := broker.New(t)
	b := obstest.Builder(t, c)
	want, err := b.Faulty(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// From here on, every request the cluster receives comes from the
	// observer and the server: none may write.
	var mu sync.Mutex
	var writes []string
	c.Fake().Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		if writeKeys[req.Key()] {
			mu.Lock()
			writes = append(writes, kmsg.NameForKey(req.Key()))
			mu.Unlock()
		}
		return nil, nil, false
	})
	_, o := obstest.Scan(t, ctx, c, observer.Config{})
	srv := httptest.NewServer(obstest.Server(t, o))
	defer srv.Close()

	code, body := get(t, srv, "/api/findings")
	var fs []observer.Finding
	if err := json.Unmarshal([]byte(body), &fs); code != 200 || err != nil || len(fs) != len(want) {
		t.Fatalf("/api/findings: %d %v: %d findings, want %d\n%s", code, err, len(fs), len(want), body)
	}
	code, body = get(t, srv, "/api/findings?code=sequence-gap")
	if err := json.Unmarshal([]byte(body), &fs); code != 200 || err != nil || len(fs) != 1 || fs[0].Code != observer.CodeSequenceGap {
		t.Errorf("/api/findings?code=sequence-gap: %d %v %+v", code, err, fs)
	}
	// Claims on a marker or an aborted record are information: Parsley
	// consumers settle them from their position. The claim past the log
	// end is the one unsettleable error.
	code, body = get(t, srv, "/api/findings?code=unsettleable-claim")
	if err := json.Unmarshal([]byte(body), &fs); code != 200 || err != nil || len(fs) != 3 {
		t.Fatalf("/api/findings?code=unsettleable-claim: %d %v: %d findings, want 3", code, err, len(fs))
	}
	bySeverity := map[observer.Severity]int{}
	for _, f := range fs {
		bySeverity[f.Severity]++
	}
	if bySeverity[observer.SeverityInfo] != 2 || bySeverity[observer.SeverityError] != 1 {
		t.Errorf("unsettleable claims by severity = %v, want 2 info (marker, aborted) and 1 error (past the log end)", bySeverity)
	}
	code, body = get(t, srv, "/api/findings?severity=error")
	if err := json.Unmarshal([]byte(body), &fs); code != 200 || err != nil || len(fs) != 4 {
		t.Errorf("/api/findings?severity=error: %d %v: %d findings, want 4 (gap, regression, unsettleable past the log end, undecodable)", code, err, len(fs))
	}
	code, body = get(t, srv, "/metrics")
	if code != 200 || !strings.Contains(body, `parsley_observer_findings_by_severity{severity="error"} 4`) || !strings.Contains(body, `parsley_observer_findings{code="unsettleable-claim"} 3`) || !strings.Contains(body, "parsley_observer_records_ingested_total") {
		t.Errorf("/metrics: %d\n%s", code, body)
	}
	for _, path := range []string{"/livez", "/healthz"} {
		if code, body := get(t, srv, path); code != 200 || body != "ok\n" {
			t.Errorf("%s: %d %q", path, code, body)
		}
	}
	code, body = get(t, srv, "/")
	if code != 200 || strings.Count(body, `<tr class="finding"`) != len(want) {
		t.Errorf("/: %d, %d finding rows, want %d", code, strings.Count(body, `<tr class="finding"`), len(want))
	}
	code, body = get(t, srv, "/?code=late-joiner-window")
	if code != 200 || strings.Count(body, `<tr class="finding"`) != 1 || !strings.Contains(body, ">up/0</span> at 0") {
		t.Errorf("/?code=late-joiner-window: %d\n%s", code, body)
	}
	if code, body := get(t, srv, "/topics"); code != 200 || !strings.Contains(body, `<tr data-topic="grow">`) {
		t.Errorf("/topics: %d", code)
	}
	down := want[len(want)-2].Coordinates[0] // the late-joiner carrier
	code, body = get(t, srv, "/api/records/"+down)
	var rec struct {
		Record   map[string]any
		Ancestry observer.Graph
	}
	if err := json.Unmarshal([]byte(body), &rec); code != 200 || err != nil || len(rec.Ancestry.Edges) != 1 || rec.Ancestry.Edges[0].Kind != "seq" ||
		rec.Record["coordinate"] != down || !strings.HasPrefix(fmt.Sprint(rec.Record["label"]), "down/0@") {
		t.Errorf("/api/records/%s: %d %v\n%s", down, code, err, body)
	}
	if code, body := get(t, srv, "/record/down/0@0"); code != 200 || !strings.Contains(body, `id="graph-data"`) {
		t.Errorf("/record/down/0@0: %d", code)
	}
	if code, body := get(t, srv, "/api/graph/down/0@0?format=dot"); code != 200 || !strings.HasPrefix(body, "digraph") {
		t.Errorf("/api/graph?format=dot: %d %s", code, body)
	}

	// Many concurrent walks and finding evaluations do not starve the
	// store's connection pool.
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for i := range 24 {
		wg.Go(func() {
			path := "/record/down/0@0"
			if i%3 == 0 {
				path = "/api/findings"
			}
			resp, err := http.Get(srv.URL + path)
			if err != nil {
				errs <- err.Error()
				return
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				errs <- path + ": " + resp.Status
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}

	// Malformed input is the client's fault: 400 with a message, never 500.
	for _, tc := range []struct {
		path string
		code int
	}{
		{"/api/findings?code=no-such-code", 400},
		{"/api/findings?severity=loud", 400},
		{"/?severity=loud", 400},
		{"/api/records/down", 400},
		{"/api/records/down/0@", 400},
		{"/api/records/down/-1@0", 400},
		{"/api/records/down/0@99999999999999999999", 400},
		{"/api/records/" + url.PathEscape("do wn") + "/0@0", 400},
		{"/api/records/down/0@0?depth=x", 400},
		{"/api/records/down/0@0?depth=0", 400},
		{"/api/records/down/0@0?limit=100000", 400},
		{"/api/graph/down/0@0?direction=sideways", 400},
		{"/api/graph/down/0@0?format=png", 400},
		{"/record/down/0@0?depth=-3", 400},
		{"/api/records/down/0@5", 404},
		{"/api/records/nosuchtopic/0@0", 404},
		{"/record/00000000-0000-0000-0000-000000000000/0@0", 400},
	} {
		code, body := get(t, srv, tc.path)
		if code != tc.code || strings.TrimSpace(body) == "" {
			t.Errorf("GET %s: %d %q, want %d with a message", tc.path, code, body, tc.code)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	if len(writes) > 0 {
		t.Errorf("the observer sent write requests to the cluster it observes: %v", writes)
	}
}

// TestReadOnlyGuardWorks proves the write detector above sees a write.
func TestReadOnlyGuardWorks(t *testing.T) {
	broker.KfakeOnly(t, "watches every request the cluster receives through a kfake Control hook")
	ctx := obstest.Ctx(t)
	c := broker.New(t)
	b := obstest.Builder(t, c)
	var seen bool
	c.Fake().Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		if writeKeys[req.Key()] {
			seen = true
		}
		return nil, nil, false
	})
	if err := b.Create(ctx, 1, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Produce(ctx, "x", 0, nil); err != nil {
		t.Fatal(err)
	}
	if !seen {
		t.Error("a produce went unseen by the write detector")
	}
	_ = obsdemo.Want{}
}

// TestSearchByKey: a search for a record key finds the findings that name
// a record with that key; the key itself is never stored, only its hash.
func TestSearchByKey(t *testing.T) {
	ctx := obstest.Ctx(t)
	c := broker.New(t)
	b := obstest.Builder(t, c)
	if err := b.Create(ctx, 1, "keyed"); err != nil {
		t.Fatal(err)
	}
	bad := &kgo.Record{Topic: "keyed", Key: []byte("cust-42"), Value: []byte("v"),
		Headers: []kgo.RecordHeader{{Key: "vc", Value: []byte{0xff, 0x01}}}}
	good := &kgo.Record{Topic: "keyed", Key: []byte("cust-7"), Value: []byte("v")}
	if err := c.Client().ProduceSync(ctx, bad, good).FirstErr(); err != nil {
		t.Fatal(err)
	}
	_, o := obstest.Scan(t, ctx, c, observer.Config{})
	srv := httptest.NewServer(obstest.Server(t, o))
	defer srv.Close()
	// cust-42's record has the bad stamp; cust-7's is the first unstamped
	// record of a topic some of whose records carry stamps.
	for _, tc := range []struct {
		q    string
		want []observer.Code
	}{
		{"cust-42", []observer.Code{observer.CodeUndecodableStamp}},
		{"cust-7", []observer.Code{observer.CodePartiallyStamped}},
		{"cust-4", nil}, // keys match whole
		{"keyed/0@1", []observer.Code{observer.CodePartiallyStamped}},
		{"nothing-like-it", nil},
	} {
		code, body := get(t, srv, "/api/findings?q="+url.QueryEscape(tc.q))
		var fs []observer.Finding
		if err := json.Unmarshal([]byte(body), &fs); code != 200 || err != nil {
			t.Fatalf("search %q: %d %v", tc.q, code, err)
		}
		var got []observer.Code
		for _, f := range fs {
			got = append(got, f.Code)
		}
		slices.Sort(got)
		slices.Sort(tc.want)
		if !slices.Equal(got, tc.want) {
			t.Errorf("search %q found %v, want %v", tc.q, got, tc.want)
		}
	}
	if code, body := get(t, srv, "/?q=cust-7"); code != 200 || strings.Count(body, `<tr class="finding"`) != 1 {
		t.Errorf("findings page search by key: %d, %d rows", code, strings.Count(body, `<tr class="finding"`))
	}
}

// TestRecordPagePreviewsPayloads: the record page previews key, value and
// headers from the brokers, capped at observer.PreviewBytes, binary as
// hex; a server without a payload reader says previews are off.
func TestRecordPagePreviewsPayloads(t *testing.T) {
	ctx := obstest.Ctx(t)
	c := broker.New(t)
	b := obstest.Builder(t, c)
	if err := b.Create(ctx, 1, "pay"); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 1000)
	r := &kgo.Record{Topic: "pay", Key: []byte("cust-42"), Value: []byte(long),
		Headers: []kgo.RecordHeader{{Key: "trace-id", Value: []byte("abc123")}, {Key: "blob", Value: []byte{0, 1, 0xfe}}}}
	if err := c.Client().ProduceSync(ctx, r).FirstErr(); err != nil {
		t.Fatal(err)
	}
	st, o := obstest.Scan(t, ctx, c, observer.Config{})
	srv := httptest.NewServer(obstest.Server(t, o))
	defer srv.Close()
	code, body := get(t, srv, "/record/pay/0@0")
	for _, want := range []string{"cust-42", ">abc123<", "00 01 fe", fmt.Sprintf("… %d more of 1000 bytes", 1000-observer.PreviewBytes)} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("record page lacks %q (status %d)", want, code)
		}
	}
	if strings.Contains(body, strings.Repeat("x", observer.PreviewBytes+1)) {
		t.Error("record page shows more of the value than the preview cap")
	}
	off, err := web.New(web.Config{Store: st})
	if err != nil {
		t.Fatal(err)
	}
	srvOff := httptest.NewServer(off)
	defer srvOff.Close()
	code, body = get(t, srvOff, "/record/pay/0@0")
	if code != 200 || !strings.Contains(body, "Payload previews are off") || strings.Contains(body, "cust-42") || strings.Contains(body, "abc123") {
		t.Errorf("record page without payloads: %d, shows payload or lacks the note", code)
	}
}
