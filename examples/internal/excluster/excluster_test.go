package excluster

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"
)

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
		c, err := Open(ctx, ln.Addr().String())
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
