package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/parsley-go/parsley/internal/rig/obstest"
	"github.com/parsley-go/parsley/observer"
)

// shardProc is one `parsley-observe serve --group` process.
type shardProc struct {
	t        *testing.T
	instance string
	args     []string
	cmd      *exec.Cmd
	url      string
	stderr   *strings.Builder
	exited   chan error
}

// start runs the shard's process and waits until it serves.
func (s *shardProc) start() {
	t := s.t
	t.Helper()
	s.cmd = exec.Command(bin, s.args...)
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s.stderr = new(strings.Builder)
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	s.exited = make(chan error, 1)
	sc := bufio.NewScanner(stdout)
	s.url = ""
	for sc.Scan() {
		if u, ok := strings.CutPrefix(sc.Text(), "parsley-observe: serving "); ok {
			s.url = strings.TrimSuffix(u, "/")
			break
		}
	}
	go func() {
		io.Copy(io.Discard, stdout)
		s.exited <- s.cmd.Wait()
	}()
	if s.url == "" {
		t.Fatalf("shard %s printed no address; stderr: %s", s.instance, s.stderr)
	}
}

// kill9 kills the process with SIGKILL: no deferred cleanup, no revoke,
// no last word to the group.
func (s *shardProc) kill9() {
	s.t.Helper()
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		s.t.Fatal(err)
	}
	<-s.exited
	s.cmd = nil
}

// stop stops the process with SIGINT; it must exit 0.
func (s *shardProc) stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(os.Interrupt)
	select {
	case err := <-s.exited:
		if err != nil {
			s.t.Errorf("shard %s exited with %v after SIGINT; stderr: %s", s.instance, err, s.stderr)
		}
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		s.t.Errorf("shard %s did not stop within 30s of SIGINT", s.instance)
	}
	s.cmd = nil
}

// getOK gets url into v (nil: discards), reporting whether it answered 200.
func getOK(url string, v any) bool {
	resp, err := http.Get(url)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return false
	}
	if v == nil {
		return true
	}
	return json.NewDecoder(resp.Body).Decode(v) == nil
}

// shapeOf is what the group must keep of a finding.
func shapeOf(f observer.Finding) string {
	return fmt.Sprintf("%s %s %s [%s] n=%d: %s", f.State, f.Severity, f.Key, strings.Join(f.Coordinates, " "), f.Count, f.Summary)
}

var findingsMetric = regexp.MustCompile(`^parsley_observer_findings\{code="([^"]+)",shard="([^"]+)"\} (\S+)$`)

// groupAgrees reports whether every shard lists as holding exactly the
// findings want lists as open (those keyed in acked as acknowledged),
// with no holding finding ever resolved or reopened, and whether the
// shards' metrics count each open one once; else what differs.
func groupAgrees(shards []*shardProc, want []observer.Finding, acked map[string]bool) (bool, string) {
	var wantShapes []string
	wantCounts := map[string]float64{}
	for _, c := range observer.AllCodes() {
		wantCounts[string(c)] = 0
	}
	for _, f := range want {
		if !f.Open() {
			continue
		}
		if acked[f.Key] {
			f.State = observer.StateAcknowledged
		} else {
			wantCounts[string(f.Code)]++
		}
		wantShapes = append(wantShapes, shapeOf(f))
	}
	slices.Sort(wantShapes)
	counts := map[string]float64{}
	agree, why := true, ""
	for _, s := range shards {
		var fs []observer.Finding
		if !getOK(s.url+"/api/findings?state=all", &fs) {
			return false, s.instance + " does not answer /api/findings"
		}
		var got []string
		for _, f := range fs {
			if f.State == observer.StateResolved {
				continue
			}
			got = append(got, shapeOf(f))
			var detail struct{ History []observer.Event }
			if !getOK(fmt.Sprintf("%s/api/findings/%d", s.url, f.ID), &detail) {
				return false, s.instance + " does not answer for finding " + f.Key
			}
			for _, e := range detail.History {
				if e.What != "acknowledged" {
					return false, fmt.Sprintf("%s: %s was %s (%s): raised twice", s.instance, f.Key, e.What, e.Why)
				}
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, wantShapes) {
			var extra, missing []string
			for _, g := range got {
				if !slices.Contains(wantShapes, g) {
					extra = append(extra, g)
				}
			}
			for _, w := range wantShapes {
				if !slices.Contains(got, w) {
					missing = append(missing, w)
				}
			}
			// Every shard is asked each time, so each evaluates.
			agree, why = false, fmt.Sprintf("%s lists, besides what one observer lists,\n  %s\nand lacks\n  %s", s.instance,
				strings.Join(extra, "\n  "), strings.Join(missing, "\n  "))
			continue
		}
		resp, err := http.Get(s.url + "/metrics")
		if err != nil {
			return false, err.Error()
		}
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if m := findingsMetric.FindStringSubmatch(sc.Text()); m != nil && m[2] == s.instance {
				v, _ := strconv.ParseFloat(m[3], 64)
				counts[m[1]] += v
			}
		}
		resp.Body.Close()
	}
	if !agree {
		return false, why
	}
	if !maps.Equal(counts, wantCounts) {
		return false, fmt.Sprintf("the shards count %v open findings, want %v", counts, wantCounts)
	}
	return true, ""
}

// TestShardsSurviveKillNine runs three `serve --group` processes over the
// faulty topology and a spread one, and checks at each step that together
// they list exactly what one observer over the same topics lists: once
// they settle; after an acknowledgement through one of them; after one is
// killed with SIGKILL while gaps, past-end claims and late-joiner windows
// keep arriving before and after (its partitions move to the others once
// its session times out); and after it restarts over its store. Nothing
// found is lost, nothing holding is ever resolved and raised again, an
// acknowledgement stays with its finding wherever the finding moves, and
// the shards' metrics count each open finding once.
func TestShardsSurviveKillNine(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c := broker.New(t)
	top := obstest.ShardedTopology(t, ctx, c)
	round, single := top.Round, top.Single
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	const token = "shard-test-token-0123456789"
	if err := os.WriteFile(tokens, []byte("tester "+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var shards []*shardProc
	for _, name := range []string{"s1", "s2", "s3"} {
		s := &shardProc{t: t, instance: name, args: []string{"serve", "--brokers", strings.Join(c.Addrs(), ","), "--pattern", ".*",
			"--group", "kill9", "--instance", name, "--db", filepath.Join(dir, name+".db"), "--listen", "127.0.0.1:0",
			"--session-timeout", "6s", "--refresh", "300ms", "--ack-tokens-file", tokens, "--log-format", "json"}}
		s.start()
		t.Cleanup(s.stop)
		shards = append(shards, s)
	}
	settle := func(what string, live []*shardProc, want []observer.Finding, acked map[string]bool) {
		t.Helper()
		var why string
		start := time.Now()
		for {
			var ok bool
			if ok, why = groupAgrees(live, want, acked); ok {
				t.Logf("%s: agreed after %v", what, time.Since(start).Round(time.Millisecond))
				return
			}
			select {
			case <-ctx.Done():
				for _, s := range shards {
					t.Logf("%s stderr (tail): %s", s.instance, tail(s.stderr.String(), 3000))
				}
				t.Fatalf("%s: the shards never agreed with one observer: %s", what, why)
			case <-time.After(250 * time.Millisecond):
			}
			// PARSLEY_SHARD_DEBUG=1 says what differs every 10s, and dumps the
			// shards' logs at the end.
			if os.Getenv("PARSLEY_SHARD_DEBUG") != "" && time.Since(start) > 10*time.Second {
				t.Logf("%v: %s", time.Since(start).Round(time.Second), why)
				start = time.Now()
			}
		}
	}
	want := single()
	settle("three shards", shards, want, nil)

	// Acknowledge every finding through s1, whichever shard records it.
	acked := map[string]bool{}
	var fs []observer.Finding
	if !getOK(shards[0].url+"/api/findings", &fs) {
		t.Fatal("s1 does not list findings")
	}
	for _, f := range fs {
		req, _ := http.NewRequest("POST", fmt.Sprintf("%s/api/findings/%d/ack", shards[0].url, f.ID), strings.NewReader(`{"reason": "known"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("acknowledge %s through s1: %s", f.Key, resp.Status)
		}
		acked[f.Key] = true
	}
	settle("after acknowledging through one shard", shards, want, acked)

	// Gaps and claims before the kill, s2 killed mid-stream, more after.
	round()
	shards[1].kill9()
	round()
	want = single()
	settle("after kill -9 of s2", []*shardProc{shards[0], shards[2]}, want, acked)

	// s2 comes back over its store: it rejoins, gets partitions again and
	// reports as before.
	shards[1].start()
	round()
	want = single()
	settle("after s2 restarted", shards, want, acked)
	if os.Getenv("PARSLEY_SHARD_DEBUG") != "" {
		for _, s := range shards {
			t.Logf("%s stderr:\n%s", s.instance, s.stderr)
		}
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
