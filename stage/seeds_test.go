package stage

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/parsley-go/parsley/internal/rig/broker"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// deadAddr is an address that refuses connections.
func deadAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// lookupFailures sends n requests on cl whose coordinator cl has never
// looked up, and counts those that failed. franz-go sends each lookup to
// the next broker of its rotation, a seed address once a round, and ends
// the request when the lookup fails to dial (kclient.Seeds).
func lookupFailures(t *testing.T, cl *kgo.Client, n int) int {
	t.Helper()
	var failed int
	for i := range n {
		req := kmsg.NewPtrOffsetFetchRequest()
		req.Group = fmt.Sprintf("seeds-probe-%d", i)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := cl.Request(ctx, req); err != nil {
			failed++
		}
		cancel()
	}
	return failed
}

// The runtime's clients — the group session's and the others — keep a
// seed that refuses connections out of their coordinator lookups: at most
// the first lookup to reach it fails. Without kclient.Seeds about a quarter
// of them would (one seed of two, every other lookup going to a seed).
func TestClientsSkipDeadSeed(t *testing.T) {
	e := newEnv(t, broker.Topic{Name: "in", Partitions: 2}, broker.Topic{Name: "out", Partitions: 2})
	in, out := NewTopic("in", String(), String()), NewTopic("out", String(), String())
	st := counterStage(in, out)
	e.changelogs(2, st)
	cfg := e.config("i1")
	cfg.Brokers = append(cfg.Brokers, deadAddr(t))
	a, err := New(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	const probes = 40
	t.Run("client", func(t *testing.T) {
		cl, err := a.newClient()
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if n := lookupFailures(t, cl, probes); n > 1 {
			t.Errorf("%d of %d coordinator lookups failed on a dead seed, want at most 1", n, probes)
		}
	})
	failed := make(chan int, 1)
	a.hooks.onSession = func(sess *kgo.GroupTransactSession) {
		select {
		case failed <- lookupFailures(t, sess.Client(), probes):
		default: // a later session: the first one answered
		}
	}
	r := e.startApp(a)
	var n int
	select {
	case n = <-failed:
	case <-time.After(60 * time.Second):
		t.Fatal("no client session started")
	}
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	if n > 1 {
		t.Errorf("%d of %d coordinator lookups of the session's client failed on a dead seed, want at most 1", n, probes)
	}
}
