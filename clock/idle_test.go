package clock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/parsley-go/parsley/clock"
	"github.com/parsley-go/parsley/headers"
)

// An IdleLookup opens its client at the first lookup, keeps it while
// lookups come, releases it once idle, opens it again on demand, and after
// close releases it and refuses lookups.
func TestIdleLookupOpensAndReleasesItsClient(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	opened, released := 0, 0
	openNow := 0 // clients open at this moment
	boom := errors.New("boom")
	open := func(context.Context) (clock.TopicIDLookup, func() error, error) {
		mu.Lock()
		defer mu.Unlock()
		opened++
		openNow++
		find := func(_ context.Context, topic string) (headers.TopicID, error) {
			if topic == "bad" {
				return headers.TopicID{}, boom
			}
			return headers.TopicID{9}, nil
		}
		return find, func() error {
			mu.Lock()
			defer mu.Unlock()
			released++
			openNow--
			return nil
		}, nil
	}
	counts := func() (int, int, int) {
		mu.Lock()
		defer mu.Unlock()
		return opened, released, openNow
	}
	lookup, closeFn := clock.IdleLookup(open, 30*time.Millisecond)

	for range 3 {
		if id, err := lookup(ctx, "t"); err != nil || id != (headers.TopicID{9}) {
			t.Fatalf("lookup = %v, %v", id, err)
		}
	}
	if _, err := lookup(ctx, "bad"); !errors.Is(err, boom) {
		t.Fatalf("a failing lookup: %v; want its error", err)
	}
	if o, r, _ := counts(); o != 1 || r != 0 {
		t.Fatalf("after back-to-back lookups: opened %d, released %d; want one client, still open", o, r)
	}
	waitFor(t, func() bool { _, r, _ := counts(); return r == 1 }, "the idle client to be released")
	if _, err := lookup(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if o, _, n := counts(); o != 2 || n != 1 {
		t.Fatalf("a lookup after the release: opened %d, %d open; want a second client", o, n)
	}
	if err := closeFn(); err != nil {
		t.Fatal(err)
	}
	if _, _, n := counts(); n != 0 {
		t.Fatalf("%d clients open after close", n)
	}
	if _, err := lookup(ctx, "t"); !errors.Is(err, clock.ErrClosed) {
		t.Fatalf("a lookup after close: %v; want ErrClosed", err)
	}
	if err := closeFn(); err != nil {
		t.Fatalf("a second close: %v", err)
	}
	if o, r, _ := counts(); o != 2 || r != 2 {
		t.Fatalf("opened %d, released %d; want each client released once", o, r)
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
