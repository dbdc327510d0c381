package main

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/obsdemo"
	"github.com/parsley-go/parsley/observer"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "parsley-observe-bin-")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "parsley-observe")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		panic("build parsley-observe: " + err.Error() + "\n" + string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// run runs the binary and returns its stdout, stderr and exit code.
func run(t *testing.T, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.String(), errb.String(), 0
	case errors.As(err, &ee):
		return out.String(), errb.String(), ee.ExitCode()
	}
	t.Fatalf("run %v: %v", args, err)
	return "", "", -1
}

func newBuilder(t *testing.T) (*broker.Cluster, *obsdemo.Builder) {
	c := broker.New(t)
	b, err := obsdemo.NewBuilder(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return c, b
}

func TestScanExitsZeroOnACleanTopology(t *testing.T) {
	ctx := context.Background()
	c, b := newBuilder(t)
	ships, err := b.Clean(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	db := filepath.Join(t.TempDir(), "obs.db")
	out, errOut, code := run(t, []string{"PARSLEY_BROKERS=" + strings.Join(c.Addrs(), ",")}, "scan", "--topics", "orders,shipments", "--db", db)
	if code != 0 {
		t.Fatalf("scan of a clean topology exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	if !strings.Contains(out, "0 findings") {
		t.Errorf("scan output: %s", out)
	}
	// The store the scan left behind answers explain and graph by topic name.
	last := "shipments/0@9"
	out, errOut, code = run(t, nil, "explain", "--db", db, last)
	if code != 0 || !strings.HasPrefix(out, "shipments/0@9\n") || !strings.Contains(out, "shipments/0@8\n") {
		t.Errorf("explain exited %d:\n%s%s", code, out, errOut)
	}
	out, errOut, code = run(t, nil, "explain", "--db", db, "--descendants", "orders/0@0")
	if code != 0 || !strings.Contains(out, "shipments/0@9") {
		t.Errorf("explain --descendants exited %d:\n%s%s", code, out, errOut)
	}
	out, _, code = run(t, nil, "graph", "--db", db, "--format", "json", last)
	var g struct {
		Nodes []struct{ ID string }
		Edges []struct{ Cause, Effect string }
	}
	if err := json.Unmarshal([]byte(out), &g); code != 0 || err != nil || len(g.Nodes) != 20 {
		t.Errorf("graph --format json exited %d (%v): %d nodes, want 20", code, err, len(g.Nodes))
	}
	// JSON keeps the exact ID beside the name.
	if !strings.Contains(out, `"id": "`+ships[9].String()+`"`) || !strings.Contains(out, `"label": "shipments/0@9"`) {
		t.Errorf("graph --format json lacks the ID or the label of %s:\n%s", ships[9], out)
	}
	out, _, code = run(t, nil, "graph", "--db", db, last)
	if code != 0 || !strings.HasPrefix(out, "digraph") || !strings.Contains(out, `"shipments/0@8" -> "shipments/0@9"`) {
		t.Errorf("graph (dot) exited %d:\n%s", code, out)
	}
	_, errOut, code = run(t, nil, "explain", "--db", db, "shipments/0@x")
	if code != 2 || !strings.Contains(errOut, "malformed coordinate") {
		t.Errorf("explain of a malformed coordinate exited %d: %s", code, errOut)
	}
}

func TestScanExitsOneOnASequenceGap(t *testing.T) {
	ctx := context.Background()
	c, b := newBuilder(t)
	if err := b.Create(ctx, 1, "gap"); err != nil {
		t.Fatal(err)
	}
	var at []headers.Coordinate
	for _, seq := range []int64{1, 2, 4} {
		c, err := b.Stamped(ctx, "gap", 0, &headers.Stamp{Tagged: true, Sender: obsdemo.GapSender, Seq: seq})
		if err != nil {
			t.Fatal(err)
		}
		at = append(at, c)
	}
	out, errOut, code := run(t, nil, "scan", "--brokers", strings.Join(c.Addrs(), ","), "--pattern", "^gap$", "--format", "json")
	if code != 1 {
		t.Fatalf("scan of a topology with a gap exited %d, want 1\nstdout: %s\nstderr: %s", code, out, errOut)
	}
	var fs []struct {
		Code        string
		Coordinates []string
	}
	if err := json.Unmarshal([]byte(out), &fs); err != nil {
		t.Fatalf("scan --format json: %v\n%s", err, out)
	}
	if len(fs) != 1 || fs[0].Code != "sequence-gap" || strings.Join(fs[0].Coordinates, " ") != at[2].String()+" "+at[1].String() {
		t.Errorf("findings %+v, want one sequence-gap at %s %s", fs, at[2], at[1])
	}
	// decode --coord reads the record's stamp from the broker.
	out, errOut, code = run(t, nil, "decode", "--brokers", c.Addrs()[0], "--coord", "gap/0@2")
	if code != 0 || !strings.Contains(out, "sender "+obsdemo.GapSender.String()+" seq 4") {
		t.Errorf("decode --coord gap/0@2: exit %d\n%s%s", code, out, errOut)
	}
	_, errOut, code = run(t, nil, "decode", "--brokers", c.Addrs()[0], "--coord", "gap/0@3")
	if code != 2 || !strings.Contains(errOut, "not found") {
		t.Errorf("decode --coord past the end: exit %d: %s", code, errOut)
	}
	// A gap is an error, so even --fail-on error fails.
	if _, _, code := run(t, nil, "scan", "--brokers", c.Addrs()[0], "--topics", "gap", "--fail-on", "error"); code != 1 {
		t.Errorf("--fail-on error: exit %d, want 1 (a gap is an error)", code)
	}
}

func TestCommandsNeedingBrokersSaySoWithoutThem(t *testing.T) {
	for _, args := range [][]string{{"scan", "--topics", "x"}, {"serve", "--topics", "x"}, {"decode", "--coord", "x/0@1"}} {
		_, errOut, code := run(t, []string{"PARSLEY_BROKERS="}, args...)
		if code != 2 || !strings.Contains(errOut, "--brokers") || !strings.Contains(errOut, "PARSLEY_BROKERS") {
			t.Errorf("%v: exit %d, stderr %q; want 2 naming --brokers and PARSLEY_BROKERS", args, code, errOut)
		}
	}
}

func TestDecodeValue(t *testing.T) {
	var clk headers.Clock
	ch := headers.Channel{Topic: headers.TopicID{1, 2, 3}, Partition: 4}
	clk.SetOffset(ch, 77)
	vc, err := headers.EncodeVC(&clk)
	if err != nil {
		t.Fatal(err)
	}
	causes, err := headers.EncodeCauses(&clk)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ value, header string }{{hex.EncodeToString(vc), "vc:"}, {hex.EncodeToString(causes), "parsley.causes:"}} {
		out, _, code := run(t, nil, "decode", tc.value)
		if code != 0 || !strings.HasPrefix(out, tc.header) || !strings.Contains(out, "offset "+ch.String()+" ≤ 77") {
			t.Errorf("decode %s: exit %d\n%s", tc.value, code, out)
		}
	}
	if out, _, code := run(t, nil, "decode", "zz-not-a-stamp"); code != 1 || !strings.Contains(out, "neither hex nor base64") {
		t.Errorf("decode of garbage: exit %d: %s", code, out)
	}
}

// startServing runs the binary with args until it prints the address it
// serves, and returns that address; the process is stopped with SIGINT
// (by PID) and must exit 0.
func startServing(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	cmd := exec.CommandContext(ctx, bin, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		defer cancel()
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			t.Errorf("signal %v: %v", args, err)
		}
		if err := cmd.Wait(); err != nil {
			t.Errorf("%v exited with %v after SIGINT; stderr: %s", args, err, stderr.String())
		}
	})
	sc := bufio.NewScanner(stdout)
	var url string
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "parsley-observe: serving "); ok {
			url = u
			break
		}
	}
	go io.Copy(io.Discard, stdout)
	if url == "" {
		t.Fatalf("%v printed no address; stderr: %s", args, stderr.String())
	}
	return url
}

func getJSON(t *testing.T, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

// TestDemoServesTheUI starts `demo` on a free port and checks the findings
// it serves.
func TestDemoServesTheUI(t *testing.T) {
	url := startServing(t, "demo", "--listen", "127.0.0.1:0")
	var fs []struct{ Code string }
	getJSON(t, url+"api/findings", &fs)
	codes := map[string]bool{}
	for _, f := range fs {
		codes[f.Code] = true
	}
	if !codes["sequence-gap"] || !codes["late-joiner-window"] || len(codes) != len(observer.AllCodes()) {
		t.Errorf("demo findings: %v; want all %d codes, including a gap and a late-joiner window", fs, len(observer.AllCodes()))
	}
	// The clean pipeline keeps running.
	shipments := func() int {
		var ts []struct {
			Name    string
			Records int
		}
		getJSON(t, url+"api/topics", &ts)
		for _, x := range ts {
			if x.Name == "shipments" {
				return x.Records
			}
		}
		return 0
	}
	first := shipments()
	for deadline := time.Now().Add(15 * time.Second); shipments() <= first; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("demo's shipments stayed at %d records", first)
		}
	}
}

// TestServeTailsIntoItsStore runs `serve` against a cluster and sees the
// records it stores through the API, then a record produced while it runs.
func TestServeTailsIntoItsStore(t *testing.T) {
	ctx := context.Background()
	c, b := newBuilder(t)
	if _, err := b.Clean(ctx, 4); err != nil {
		t.Fatal(err)
	}
	url := startServing(t, "serve", "--brokers", c.Addrs()[0], "--pattern", "^(orders|shipments)$",
		"--db", filepath.Join(t.TempDir(), "obs.db"), "--listen", "127.0.0.1:0")
	waitRecords := func(want int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			var ts []struct {
				Name    string
				Records int
			}
			getJSON(t, url+"api/topics", &ts)
			total := 0
			for _, x := range ts {
				total += x.Records
			}
			if total == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("serve stored %v, want %d records over orders and shipments", ts, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitRecords(8)
	if _, err := b.Stamped(ctx, "orders", 1, &headers.Stamp{}); err != nil {
		t.Fatal(err)
	}
	waitRecords(9)
	resp, err := http.Get(url + "healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/healthz: %v %v", resp, err)
	}
	resp.Body.Close()
}
