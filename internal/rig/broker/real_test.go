package broker_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
)

func needReal(t *testing.T) {
	t.Helper()
	if !broker.Real() {
		t.Skip("needs a real cluster: set " + broker.EnvBrokers)
	}
}

// TestRealStartWipesTheLastTest checks the isolation the real-Kafka tier
// relies on: a topic and a group left by one test are gone when the next
// one starts.
func TestRealStartWipesTheLastTest(t *testing.T) {
	needReal(t)
	first, err := broker.Start(ctx(t), broker.Topics(broker.Topic{Name: "left-over", Partitions: 2}))
	if err != nil {
		t.Fatal(err)
	}
	cl, err := first.NewClient(kgo.ConsumerGroup("left-over-group"), kgo.ConsumeTopics("left-over"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx(t), &kgo.Record{Topic: "left-over", Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if fs := cl.PollFetches(ctx(t)); fs.Err0() != nil {
		t.Fatal(fs.Err0())
	}
	if err := cl.CommitUncommittedOffsets(ctx(t)); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	first.Close()

	second := broker.New(t)
	topics, err := second.Admin().ListTopics(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has("left-over") {
		t.Errorf("topic left-over survived into the next test")
	}
	groups, err := second.Admin().ListGroups(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(groups.Groups()) != 0 {
		t.Errorf("groups %v survived into the next test", groups.Groups())
	}
}

// envLeaseProbe makes the test binary, re-executed by
// TestRealLeaseExcludesOtherProcesses, try to take the lease once.
const envLeaseProbe = "PARSLEY_BROKER_LEASE_PROBE"

// TestRealLeaseProbe is the child side: it exits 0 if the lease was taken
// within a moment, 3 if the wait timed out.
func TestRealLeaseProbe(t *testing.T) {
	if os.Getenv(envLeaseProbe) == "" {
		t.Skip("run by TestRealLeaseExcludesOtherProcesses")
	}
	short, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	c, err := broker.Start(short)
	switch {
	case err == nil:
		c.Close()
		os.Exit(0)
	case errors.Is(err, context.DeadlineExceeded):
		os.Exit(3)
	default:
		t.Fatal(err)
	}
}

// TestRealLeaseExcludesOtherProcesses checks that another test process
// waits for the lease rather than wiping the cluster under this one, and
// gets it once this one closes.
func TestRealLeaseExcludesOtherProcesses(t *testing.T) {
	needReal(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	probe := func() int {
		cmd := exec.Command(exe, "-test.run=^TestRealLeaseProbe$", "-test.count=1")
		cmd.Env = append(os.Environ(), envLeaseProbe+"=1")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		if err != nil {
			t.Fatalf("probe: %v\n%s", err, out)
		}
		return 0
	}
	held, err := broker.Start(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if code := probe(); code != 3 {
		held.Close()
		t.Fatalf("another process took the lease while this one held it (probe exit %d, want 3)", code)
	}
	held.Close()
	if code := probe(); code != 0 {
		t.Fatalf("another process could not take the lease once it was free (probe exit %d, want 0)", code)
	}
}

// TestRealNestedStartIsTheSameClusterEmptied checks that a second Start
// within a test does not wait for the lease the test already holds, and
// hands over the same cluster wiped, as a new cluster would be.
func TestRealNestedStartIsTheSameClusterEmptied(t *testing.T) {
	needReal(t)
	outer := broker.New(t, broker.Topics(broker.Topic{Name: "outer"}))
	inner, err := broker.Start(ctx(t), broker.Topics(broker.Topic{Name: "inner"}))
	if err != nil {
		t.Fatalf("nested Start: %v", err)
	}
	defer inner.Close()
	topics, err := outer.Admin().ListTopics(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if topics.Has("outer") || !topics.Has("inner") {
		t.Fatalf("topics after the nested Start: %v, want only inner", topics.Names())
	}
}

func TestKfakeOnlySkipsOnlyOnRealKafka(t *testing.T) {
	ran := false
	t.Run("probe", func(t *testing.T) {
		broker.KfakeOnly(t, "probe")
		ran = true
	})
	if ran == broker.Real() {
		t.Fatalf("KfakeOnly let the test run = %v with Real() = %v", ran, broker.Real())
	}
}
