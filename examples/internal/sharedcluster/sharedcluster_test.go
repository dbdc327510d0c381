package sharedcluster

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// examples are every example and a line of its normal output.
var examples = []struct{ name, normal string }{
	{"quickstart", "observer: 0 problems"},
	{"settlements", ", 0 out of causal order"},
	{"request-reply", "effect before reply held for all"},
	{"plain-producer", "consumer-producer wrote "},
	{"ticks", "sales totalled across"},
	{"nats-bridge", "every payment follows its order"},
	{"copartition", "the intended broken case"},
}

// userTopics are a user's own topics, under the plain names the examples
// once used, with another partition count than any example's and a record
// each: a run that used one would fail, or write to it.
var userTopics = []string{"orders", "payments", "settlements", "notifications", "invoices", "refunds",
	"balances", "transfers", "ledger", "replies", "audit-log", "sales", "totals", "window-reports",
	"signups", "profiles", "welcomes"}

var prefixLine = regexp.MustCompile(`(?m)^run prefix "([^"]+)"`)

// TestEveryExampleOnASharedCluster runs every example with --brokers
// against the real-Kafka tier's broker, which already holds a user's
// topics; then all of them a second time, after the others. Every run must
// exit 0 with its normal output, print its generated prefix, leave the
// user's topics as they were (same topics, same end offsets, no group)
// and leave nothing behind; a run with a chosen --prefix keeps its topics,
// every one under that prefix.
func TestEveryExampleOnASharedCluster(t *testing.T) {
	if !broker.Real() {
		t.Skip("needs the real-Kafka tier: set " + broker.EnvBrokers + " (docs/testing.md)")
	}
	var topics []broker.Topic
	for _, n := range userTopics {
		topics = append(topics, broker.Topic{Name: n, Partitions: 5})
	}
	c := broker.New(t, broker.Topics(topics...))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	for _, n := range userTopics {
		if err := c.Client().ProduceSync(ctx, &kgo.Record{Topic: n, Key: []byte("user"), Value: []byte("the user's own")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	before := settledSnapshot(ctx, t, c.Admin())
	brokers := strings.Join(c.Addrs(), ",")

	// One go build for all, so the links run side by side.
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator))
	for _, ex := range examples {
		build.Args = append(build.Args, "./examples/"+ex.name)
	}
	build.Dir = moduleRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the examples: %v\n%s", err, out)
	}
	run := func(name string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(bin, name), append([]string{"--brokers", brokers}, args...)...)
		cmd.Env = append(os.Environ(), "PARSLEY_BROKERS=")
		cmd.Dir = t.TempDir()
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", name, args, err, out)
		}
		return string(out)
	}

	for round := 1; round <= 2; round++ {
		for _, ex := range examples {
			out := run(ex.name)
			m := prefixLine.FindStringSubmatch(out)
			if m == nil || !strings.HasPrefix(m[1], "ex-") {
				t.Fatalf("round %d, %s printed no generated run prefix:\n%s", round, ex.name, out)
			}
			for _, want := range []string{ex.normal, "deleted this run's "} {
				if !strings.Contains(out, want) {
					t.Errorf("round %d, %s: output lacks %q:\n%s", round, ex.name, want, out)
				}
			}
			after, groups, err := asBefore(ctx, c.Admin(), before)
			if !maps.Equal(after, before) || len(groups) > 0 {
				t.Fatalf("round %d, %s (prefix %s) changed the cluster (%v):\ntopics before %v\ntopics after  %v\ngroups after %q\n%s",
					round, ex.name, m[1], err, before, after, groups, out)
			}
		}
	}

	// A chosen prefix keeps the run's topics, every one under it.
	const keep = "kept.quickstart-"
	run("quickstart", "--prefix", keep)
	after, err := snapshot(ctx, c.Admin())
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for n := range after {
		if _, ok := before[n]; !ok {
			kept = append(kept, n)
		} else if after[n] != before[n] {
			t.Errorf("quickstart --prefix %s wrote to the user's %s", keep, n)
		}
	}
	if len(kept) == 0 || slices.ContainsFunc(kept, func(n string) bool { return !strings.HasPrefix(n, keep) }) {
		t.Errorf("quickstart --prefix %s left topics %q, want some, all under the prefix", keep, kept)
	}
}

// snapshot maps every topic on the cluster to the sum of its partitions'
// end offsets.
func snapshot(ctx context.Context, adm *kadm.Client) (map[string]int64, error) {
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		return nil, err
	}
	ends, err := adm.ListEndOffsets(ctx, topics.Names()...)
	if err != nil {
		return nil, err
	}
	snap := make(map[string]int64)
	for _, n := range topics.Names() {
		snap[n] = 0
	}
	var errs []error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			errs = append(errs, fmt.Errorf("end offset of %s[%d]: %w", o.Topic, o.Partition, o.Err))
		}
		snap[o.Topic] += o.Offset
	})
	return snap, errors.Join(errs...)
}

// asBefore waits up to 30 seconds for the cluster to be as before was
// (the same topics, each at the same end offsets) with no consumer group
// left, since a deleted topic may linger in the metadata for a moment, and
// returns what it saw last and the error of the last look.
func asBefore(ctx context.Context, adm *kadm.Client, before map[string]int64) (after map[string]int64, groups []string, err error) {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		after, err = snapshot(ctx, adm)
		if err == nil {
			var listed kadm.ListedGroups
			listed, err = adm.ListGroups(ctx)
			groups = listed.Groups()
		}
		if err == nil && maps.Equal(after, before) && len(groups) == 0 || time.Now().After(deadline) {
			return after, groups, err
		}
	}
}

// settledSnapshot is snapshot once the cluster answers for every topic it
// lists: right after an earlier test deleted its topics, a broker may still
// list them and answer UNKNOWN_TOPIC_OR_PARTITION for their offsets (the
// real-Kafka tier met it for every topic at once), so it asks again for up
// to 30 seconds before failing the test.
func settledSnapshot(ctx context.Context, t *testing.T, adm *kadm.Client) map[string]int64 {
	t.Helper()
	for tries, deadline := 1, time.Now().Add(30*time.Second); ; tries++ {
		snap, err := snapshot(ctx, adm)
		if err == nil {
			if tries > 1 {
				t.Logf("the cluster answered for every topic it lists at try %d", tries)
			}
			return snap
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("the cluster's topics before the run: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// readYourWrites is the read-your-writes example's summary line.
var readYourWrites = regexp.MustCompile(`read-your-writes: (\d+) reads with token, (\d+) stale; (\d+) of (\d+) reads without token stale`)

// TestReadYourWritesOnASharedCluster runs the read-your-writes example
// once, with its default 1,000 requests, against the real-Kafka tier's
// broker (issue 33): every read with a token must show its write, as on
// the embedded broker, and the run must leave the cluster as it found it.
// It runs apart from TestEveryExampleOnASharedCluster's two rounds, to add
// one run to the tier's wall time.
func TestReadYourWritesOnASharedCluster(t *testing.T) {
	if !broker.Real() {
		t.Skip("needs the real-Kafka tier: set " + broker.EnvBrokers + " (docs/testing.md)")
	}
	c := broker.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	before := settledSnapshot(ctx, t, c.Admin())
	bin := filepath.Join(t.TempDir(), "read-your-writes")
	build := exec.Command("go", "build", "-o", bin, "./examples/read-your-writes")
	build.Dir = moduleRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the example: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, bin, "--brokers", strings.Join(c.Addrs(), ","))
	cmd.Env = append(os.Environ(), "PARSLEY_BROKERS=")
	cmd.Dir = t.TempDir()
	b, err := cmd.CombinedOutput()
	out := string(b)
	if err != nil {
		t.Fatalf("read-your-writes: %v\n%s", err, out)
	}
	m := readYourWrites.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no summary line:\n%s", out)
	}
	t.Log(m[0])
	if m[1] != "1000" || m[2] != "0" || m[4] != "1000" {
		t.Errorf("summary %q: want 1000 reads with token, 0 stale", m[0])
	}
	if !strings.Contains(out, "deleted this run's ") || prefixLine.FindStringSubmatch(out) == nil {
		t.Errorf("no run prefix or no clean-up in the output:\n%s", out)
	}
	after, groups, err := asBefore(ctx, c.Admin(), before)
	if !maps.Equal(after, before) || len(groups) > 0 {
		t.Fatalf("read-your-writes changed the cluster (%v):\ntopics before %v\ntopics after  %v\ngroups after %q\n%s", err, before, after, groups, out)
	}
}
