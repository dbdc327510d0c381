package stage

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
)

// TestHealthHandler: /livez and /readyz answer 503 before Run, 200 once
// the instance joined and its tasks restored and built, and 503 after Run
// returned.
func TestHealthHandler(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := On(Named("h"), in, func(m Message[string, string]) ([]Emission, error) {
		return []Emission{out.Send(m.Key, m.Value)}, nil
	}).Into(out).MustBuild()
	e.changelogs(2, st)
	a, err := New(e.config("i1"), st)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.HealthHandler())
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b strings.Builder
		buf := make([]byte, 512)
		n, _ := resp.Body.Read(buf)
		b.Write(buf[:n])
		return resp.StatusCode, b.String()
	}
	for _, p := range []string{"/livez", "/readyz"} {
		if code, body := get(p); code != http.StatusServiceUnavailable {
			t.Errorf("%s before Run: %d %q", p, code, body)
		}
	}
	r := e.startApp(a)
	waitFor(t, 20*time.Second, "ready", func() bool { code, _ := get("/readyz"); return code == http.StatusOK })
	if code, _ := get("/livez"); code != http.StatusOK {
		t.Errorf("/livez while running: %d", code)
	}
	if n := len(a.Tasks()); n != 2 {
		t.Errorf("ready with %d tasks, want both", n)
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/livez", "/readyz"} {
		if code, body := get(p); code != http.StatusServiceUnavailable || !strings.Contains(body, "stopped") {
			t.Errorf("%s after Run: %d %q", p, code, body)
		}
	}
}

// TestReadinessStates: not ready while an assigned task restores, while an
// assignment change is not yet reconciled, or after the session ended.
func TestReadinessStates(t *testing.T) {
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := On(Named("h"), in, func(m Message[string, string]) ([]Emission, error) { return nil, nil }).Into(out).MustBuild()
	a, err := New(Config{ApplicationID: "app", InstanceID: "i", Brokers: []string{"unused:1"}, StateDir: t.TempDir()}, st)
	if err != nil {
		t.Fatal(err)
	}
	a.status.started.Store(true)
	a.build() // the parts, with no cluster: nothing here reaches one
	a.tm.ready, a.tm.seen = true, a.own.currentVersion()
	tk := &task{st: st, id: taskID{0, 3}, partition: 3}
	a.tm.tasks[tk.id] = tk
	check := func(want bool, why string) {
		t.Helper()
		a.observe()
		ok, got := a.Readiness()
		if ok != want || !strings.Contains(got, why) {
			t.Fatalf("Readiness() = %v %q, want %v %q", ok, got, want, why)
		}
	}
	a.tm.restores[tk.id] = &restoreJob{}
	check(false, `task h/3 restoring`)
	if ts := a.Tasks(); len(ts) != 1 || !ts[0].Restoring {
		t.Fatalf("Tasks() = %+v, want h/3 restoring", ts)
	}
	delete(a.tm.restores, tk.id)
	check(false, `task h/3 restored, starting`)
	tk.timers.built = true
	check(true, "")
	a.own.bump()
	check(false, "joining")
	a.tm.seen = a.own.currentVersion()
	check(true, "")
	a.sessionEnded()
	if ok, why := a.Readiness(); ok || !strings.Contains(why, "rejoining") {
		t.Fatalf("after the session: %v %q", ok, why)
	}
}
