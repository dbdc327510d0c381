package broker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/broker"
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

// TestRealLeaseIsExclusive checks that a second Start waits for the first
// to close rather than wiping the cluster under it.
func TestRealLeaseIsExclusive(t *testing.T) {
	needReal(t)
	held := broker.New(t)
	short, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if c, err := broker.Start(short); !errors.Is(err, context.DeadlineExceeded) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("second Start while the lease is held: err = %v, want a deadline", err)
	}
	held.Close()
	c, err := broker.Start(ctx(t))
	if err != nil {
		t.Fatalf("Start after the lease ended: %v", err)
	}
	c.Close()
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
