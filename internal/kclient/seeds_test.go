package kclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

var errRefused = fmt.Errorf("unable to dial: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})

func meta(t *testing.T, addr string, id int32) kgo.BrokerMetadata {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return kgo.BrokerMetadata{NodeID: id, Host: host, Port: int32(p)}
}

// A fake connection for the hook: only its presence matters.
type conn struct{ net.Conn }

func seedsClient(t *testing.T, seeds ...string) (*kgo.Client, *Seeds) {
	t.Helper()
	s := new(Seeds)
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), s.Opt())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	s.Attach(cl)
	return cl, s
}

func wantLive(t *testing.T, s *Seeds, want ...string) {
	t.Helper()
	if got := s.Live(); !slices.Equal(got, want) {
		t.Fatalf("Live() = %q, want %q", got, want)
	}
}

// A refused seed leaves the list, comes back when a connection to it
// opens, and the list is never emptied.
func TestSeedsPruneOnRefusal(t *testing.T) {
	a, b, c := "127.0.0.1:19001", "127.0.0.1:19002", "127.0.0.1:19003"
	_, s := seedsClient(t, a, b, c)
	wantLive(t, s, a, b, c)

	s.OnBrokerConnect(meta(t, b, math32Seed(1)), 0, nil, errRefused)
	wantLive(t, s, a, c)
	// A discovered broker at a seed's address counts as that seed.
	s.OnBrokerConnect(meta(t, c, 3), 0, nil, errRefused)
	wantLive(t, s, a)
	// Every seed refused: all come back rather than none.
	s.OnBrokerConnect(meta(t, a, 1), 0, nil, errRefused)
	wantLive(t, s, a, b, c)
	s.OnBrokerConnect(meta(t, b, 2), 0, conn{}, nil)
	wantLive(t, s, b)
	s.OnBrokerConnect(meta(t, a, 1), 0, conn{}, nil)
	wantLive(t, s, a, b)

	// Neither a dial its request gave up on nor a failed handshake on an
	// open connection says the broker is down.
	s.OnBrokerConnect(meta(t, a, 1), 0, nil, fmt.Errorf("unable to dial: %w", context.Canceled))
	s.OnBrokerConnect(meta(t, b, 2), 0, conn{}, errors.New("SASL handshake failed"))
	s.OnBrokerConnect(meta(t, "127.0.0.1:19999", 9), 0, nil, errRefused) // not a seed
	wantLive(t, s, a, b)
}

func math32Seed(i int32) int32 { return -1<<31 + i } // franz-go's seed node IDs

// Connections made before Attach are applied at Attach.
func TestSeedsHookBeforeAttach(t *testing.T) {
	a, b := "127.0.0.1:19001", "127.0.0.1:19002"
	s := new(Seeds)
	if got := s.Live(); got != nil {
		t.Fatalf("Live() before Attach = %q, want nil", got)
	}
	s.OnBrokerConnect(meta(t, a, math32Seed(0)), 0, nil, errRefused)
	cl, err := kgo.NewClient(kgo.SeedBrokers(a, b), s.Opt())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	s.Attach(cl)
	wantLive(t, s, b)
}

func TestSeedAddr(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:9093": "127.0.0.1:9093",
		"localhost":      "localhost:9092",
		"[::1]:9094":     "[::1]:9094",
		"[::1]":          "[::1]:9092",
		"::1":            "[::1]:9092",
	} {
		if got := seedAddr(in); got != want {
			t.Errorf("seedAddr(%q) = %q, want %q", in, got, want)
		}
	}
}

// On a real client, coordinator lookups stop going to a seed that refuses
// connections. franz-go sends each lookup to the next broker of its
// "any broker" rotation, a seed address once a round, and ends the request
// waiting on a lookup that failed to dial; without Seeds, a share of the
// requests fails for as long as the seed is dead (the control below).
func TestSeedsKeepLookupsOffDeadBroker(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close() // connections to it are refused from now on
	seeds := append(c.ListenAddrs(), dead)

	const requests = 200
	failures := func(cl *kgo.Client) int {
		var n int
		for i := range requests {
			// A group never asked for before: every request looks its
			// coordinator up.
			req := kmsg.NewPtrOffsetFetchRequest()
			req.Group = fmt.Sprintf("g%d", i)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := cl.Request(ctx, req)
			cancel()
			if err != nil {
				n++
			}
		}
		return n
	}
	opts := append(Opts(), kgo.SeedBrokers(seeds...))

	plain, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	without := failures(plain)
	plain.Close()
	if without < 2 {
		t.Fatalf("control: %d of %d requests failed without Seeds; the test no longer reproduces franz-go's dead-seed lookup", without, requests)
	}

	cl, err := NewClient(opts...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// The first refusal may fail its own request; it also takes the seed
	// out, so no other request fails.
	if with := failures(cl); with > 1 {
		t.Errorf("%d of %d requests failed with Seeds (%d without), want at most 1", with, requests, without)
	}
	t.Logf("failed requests: %d without Seeds, at most 1 with", without)
}
