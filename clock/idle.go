package clock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/parsley-go/parsley/headers"
)

// ErrClosed is wrapped by the lookups of a clock whose Close released the
// client they went through.
var ErrClosed = errors.New("clock: closed")

// DefaultLookupIdle is how long an IdleLookup keeps its client open after
// the last lookup: twice DefaultTopicIDMaxAge, so a producer that stamps
// steadily keeps it, and one that stopped lets it go.
const DefaultLookupIdle = 2 * DefaultTopicIDMaxAge

// A LookupOpener opens a client to look topic IDs up through, returning
// the lookup and the function that releases the client.
type LookupOpener func(ctx context.Context) (lookup TopicIDLookup, release func() error, err error)

// IdleLookup returns a TopicIDLookup that opens its client with open at the
// first lookup, keeps it while lookups keep coming, and releases it once
// idle (≤ 0 means DefaultLookupIdle) passes without one; a later lookup
// opens it again. So a clock whose adapter made the client needs no Close:
// nothing stays open while nothing is looked up. close releases the client
// at once, if open, and fails every later lookup with ErrClosed; pass it to
// New with OnClose, so the clock's Close calls it.
func IdleLookup(open LookupOpener, idle time.Duration) (lookup TopicIDLookup, close func() error) {
	if idle <= 0 {
		idle = DefaultLookupIdle
	}
	l := &idleLookup{open: open, idle: idle}
	return l.lookup, l.close
}

// idleLookup owns the client of an IdleLookup. Its timer is the only
// goroutine it starts, and it runs only to release an idle client.
type idleLookup struct {
	open LookupOpener
	idle time.Duration

	mu       sync.Mutex
	find     TopicIDLookup // nil while no client is open
	release  func() error
	inflight int
	timer    *time.Timer
	armed    uint64 // counts timers set; a timer releases only if it is the last one
	closed   bool
}

func (l *idleLookup) lookup(ctx context.Context, topic string) (id headers.TopicID, err error) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return id, ErrClosed
	}
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	if l.find == nil {
		// Opened under the lock: concurrent first lookups wait for one
		// client rather than open several.
		find, release, err := l.open(ctx)
		if err != nil {
			l.mu.Unlock()
			return id, err
		}
		l.find, l.release = find, release
	}
	find := l.find
	l.inflight++
	l.mu.Unlock()

	got, err := find(ctx, topic)

	l.mu.Lock()
	l.inflight--
	if l.inflight == 0 && !l.closed {
		l.armed++
		armed := l.armed
		l.timer = time.AfterFunc(l.idle, func() { l.releaseIdle(armed) })
	}
	l.mu.Unlock()
	return got, err
}

// releaseIdle releases the client if no lookup came since the timer armed
// was set.
func (l *idleLookup) releaseIdle(armed uint64) {
	l.mu.Lock()
	if armed != l.armed || l.inflight > 0 || l.find == nil || l.timer == nil {
		l.mu.Unlock()
		return
	}
	release := l.release
	l.find, l.release, l.timer = nil, nil, nil
	l.mu.Unlock()
	// Nothing to report a failed release to: the client was idle, and the
	// next lookup opens another.
	_ = release()
}

func (l *idleLookup) close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	release := l.release
	l.find, l.release = nil, nil
	l.mu.Unlock()
	if release == nil {
		return nil
	}
	return release()
}
