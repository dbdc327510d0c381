package bridge

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"
)

// withCluster starts n JetStream servers on loopback, routed to each other
// as one cluster, and returns a copy of e whose NATS is the cluster (its
// URL lists every server). The servers stop when the test ends.
func (e *env) withCluster(t testing.TB, n int) *env {
	t.Helper()
	routes := make([]*url.URL, n)
	ports := make([]int, n)
	for i := range n {
		// A free port for each route listener, known before any server
		// starts so each can be given the others'.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		routes[i] = &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", ports[i])}
	}
	servers := make([]*server.Server, n)
	for i := range n {
		s, err := server.NewServer(&server.Options{
			ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "bench", Host: "127.0.0.1", Port: ports[i]},
			Routes:  routes,
		})
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		servers[i] = s
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	}
	for _, s := range servers {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("nats-server not ready within 10s")
		}
	}
	c := *e
	c.nats, c.natsPort = nil, servers[0].Addr().(*net.TCPAddr).Port
	for deadline := time.Now().Add(30 * time.Second); ; {
		leader := false
		for _, s := range servers {
			leader = leader || s.JetStreamIsLeader()
		}
		if leader {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no JetStream meta leader within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &c
}

// createStreamWaiting creates a stream as createStream does, retrying for
// 30 seconds while a cluster finds no peers to place it on (a peer that
// fell behind on a loaded machine counts as offline for a while).
func (e *env) createStreamWaiting(cfg jetstream.StreamConfig) {
	e.t.Helper()
	js, done := e.js()
	defer done()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := js.CreateStream(ctx, cfg)
		cancel()
		var apiErr *jetstream.APIError
		if err == nil {
			return
		}
		// 10005: no suitable peers for placement.
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != 10005 || time.Now().After(deadline) {
			e.t.Fatal(err)
		}
	}
}
