package excluster

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/parsley-go/parsley/examples/internal/excli"
	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kadm"
)

// TestOpenExistingTopics: on a cluster that already holds some of the
// run's topics, Open stops with a TopicMismatchError naming the topic and
// the setting when one differs, uses one that matches, and, under a
// generated prefix, Close deletes exactly what the run created and the
// groups under its prefix.
func TestOpenExistingTopics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const p = "ex-abcdef-"
	b := broker.New(t, broker.Topics(
		broker.Topic{Name: p + "two", Partitions: 2},
		broker.Topic{Name: p + "plain", Partitions: 1},
		broker.Topic{Name: p + "same", Partitions: 1},
		broker.Topic{Name: "users-own", Partitions: 1},
	))
	addrs := strings.Join(b.Addrs(), ",")
	target := excli.Target{Brokers: addrs, Prefix: p}

	for _, tc := range []struct {
		topic       Topic
		setting     string
		found, want string
	}{
		{Topic{Name: p + "two", Partitions: 3}, "partitions", "2", "3"},
		{Topic{Name: p + "plain", Partitions: 1, Compact: true}, "cleanup.policy", "delete", "compact"},
	} {
		c, err := Open(ctx, io.Discard, target, tc.topic)
		if err == nil {
			c.Close()
		}
		var m *TopicMismatchError
		if !errors.Is(err, ErrTopicMismatch) || !errors.As(err, &m) ||
			*m != (TopicMismatchError{Topic: tc.topic.Name, Setting: tc.setting, Found: tc.found, Want: tc.want}) {
			t.Errorf("Open(%+v) = %v; want a mismatch of %s: found %s, want %s", tc.topic, err, tc.setting, tc.found, tc.want)
		} else if !strings.Contains(err.Error(), tc.topic.Name) || !strings.Contains(err.Error(), tc.setting) {
			t.Errorf("the error does not name the topic and the setting: %v", err)
		}
	}
	if _, err := Open(ctx, io.Discard, target, Topic{Name: "users-own", Partitions: 1}); err == nil || !strings.Contains(err.Error(), "outside the run prefix") {
		t.Errorf("Open of a topic outside the prefix = %v, want refused", err)
	}

	var out bytes.Buffer
	c, err := Open(ctx, &out, target, Topic{Name: p + "same", Partitions: 1}, Topic{Name: p + "new", Partitions: 2, Compact: true})
	if err != nil {
		t.Fatal(err)
	}
	// A group under the prefix, as a stage of the run leaves one.
	var offs kadm.Offsets
	offs.Add(kadm.Offset{Topic: p + "new", Partition: 0, At: 0})
	if _, err := b.Admin().CommitOffsets(ctx, p+"app", offs); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if !strings.Contains(out.String(), "deleted this run's 1 topics and 1 groups") {
		t.Errorf("Close said %q", out.String())
	}
	topics, err := b.Admin().ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := topics.Names()
	slices.Sort(names)
	if want := []string{p + "plain", p + "same", p + "two", "users-own"}; !slices.Equal(names, want) {
		t.Errorf("after Close the cluster has topics %q, want %q: only the run's new topic gone", names, want)
	}
	groups, err := b.Admin().ListGroups(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if gs := groups.Groups(); len(gs) > 0 {
		t.Errorf("after Close the cluster has groups %q, want none", gs)
	}
}

// TestOpenSilentBroker: a broker that accepts connections and never
// answers makes Open fail within its context, with an error that names
// the address, instead of hanging in the client's retries.
func TestOpenSilentBroker(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		var conns []net.Conn // held open, never answered
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		c, err := Open(ctx, io.Discard, excli.Target{Brokers: ln.Addr().String(), Prefix: "ex-000000-"})
		if err == nil {
			c.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), ln.Addr().String()) {
			t.Fatalf("Open = %v, want an error naming %s", err, ln.Addr())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Open still waiting on a silent broker 29s past its context's deadline")
	}
}
