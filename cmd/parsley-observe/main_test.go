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
	"github.com/parsley-go/parsley/internal/broker"
	"github.com/parsley-go/parsley/internal/obsdemo"
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
	if code != 0 || !strings.HasPrefix(out, ships[9].String()+" (shipments)\n") || !strings.Contains(out, ships[8].String()) {
		t.Errorf("explain exited %d:\n%s%s", code, out, errOut)
	}
	out, _, code = run(t, nil, "graph", "--db", db, "--format", "json", last)
	var g struct {
		Nodes []struct{ ID string }
		Edges []struct{ Cause, Effect string }
	}
	if err := json.Unmarshal([]byte(out), &g); code != 0 || err != nil || len(g.Nodes) != 20 {
		t.Errorf("graph --format json exited %d (%v): %d nodes, want 20", code, err, len(g.Nodes))
	}
	out, _, code = run(t, nil, "graph", "--db", db, last)
	if code != 0 || !strings.HasPrefix(out, "digraph") || !strings.Contains(out, `"`+ships[8].String()+`" -> "`+ships[9].String()+`"`) {
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

// TestDemoServesTheUI starts `demo` on a free port, reads the address it
// prints, checks the findings it serves, and stops it with SIGINT.
func TestDemoServesTheUI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "demo", "--listen", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill() // by PID; a no-op once it exited
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
		t.Fatalf("demo printed no address; stderr: %s", stderr.String())
	}
	resp, err := http.Get(url + "api/findings")
	if err != nil {
		t.Fatal(err)
	}
	var fs []struct{ Code string }
	err = json.NewDecoder(resp.Body).Decode(&fs)
	resp.Body.Close()
	codes := map[string]bool{}
	for _, f := range fs {
		codes[f.Code] = true
	}
	if err != nil || !codes["sequence-gap"] || !codes["late-joiner-window"] || len(codes) != 7 {
		t.Errorf("demo findings (%v): %v; want all seven codes, including a gap and a late-joiner window", err, fs)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("demo exited with %v after SIGINT; stderr: %s", err, stderr.String())
	}
}
