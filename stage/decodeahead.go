package stage

// Decoding ahead: while the step goroutine runs the gate, user logic and
// the producer for a step's records, a second goroutine decodes the keys
// and values of the records further on in the same fetch. Decoding is
// usually the largest piece of per-record work a handler does not control
// (a JSON value costs more than the gate and the stamp together), it is a
// pure function of the record's bytes, and the step goroutine would
// otherwise do it between two deliveries that must stay in order. Moving
// it to another core leaves the step goroutine the work that has to be
// sequential.
//
// Nothing about order or exactly-once changes: the step goroutine still
// delivers in the gate's order, and a record whose decoding is not done
// when it is delivered (or that the gate released from an earlier step)
// is decoded there, as before. A decode error or panic is reported when
// its record is delivered, with the same error as without decoding ahead.
// The only new requirement is the one Codec documents: codecs are safe for
// concurrent use.

import (
	"sort"
	"sync"
	"sync/atomic"

	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kgo"
)

// aheadDecoder decodes one task's records of one source topic within a
// step: a window of one fetched partition's records, in offset order.
type aheadDecoder interface {
	// reset makes recs the window; the step goroutine calls it before any
	// worker starts.
	reset(recs []*kgo.Record)
	// window is the current window (nil when none).
	window() []*kgo.Record
	// work decodes the window's records no one has claimed, in order,
	// until the window ends or stop is set. Workers may run it at once.
	work(stop *atomic.Bool)
	// clear drops the window and what was decoded; the step goroutine
	// calls it after every worker has returned.
	clear()
}

const (
	slotFree  = iota // nobody decodes the record
	slotTaken        // a worker decodes it, or the step goroutine gave up on it
	slotDone         // decoded: key, value and err are final
)

type aheadSlot[K, V any] struct {
	state atomic.Uint32
	key   K
	value V
	err   error
}

// typedAhead is a source's aheadDecoder, typed by its topic's codecs.
type typedAhead[K, V any] struct {
	t     *Topic[K, V]
	recs  []*kgo.Record
	slots []aheadSlot[K, V]
	next  atomic.Int64 // the next index a worker claims
}

func (a *typedAhead[K, V]) reset(recs []*kgo.Record) {
	a.recs = recs
	if cap(a.slots) < len(recs) {
		a.slots = make([]aheadSlot[K, V], len(recs))
	} else {
		a.slots = a.slots[:len(recs)]
	}
	a.next.Store(0)
}

func (a *typedAhead[K, V]) window() []*kgo.Record { return a.recs }

func (a *typedAhead[K, V]) work(stop *atomic.Bool) {
	for !stop.Load() {
		i := int(a.next.Add(1) - 1)
		if i >= len(a.slots) {
			return
		}
		s := &a.slots[i]
		if !s.state.CompareAndSwap(slotFree, slotTaken) {
			continue // the step goroutine got there first
		}
		r := a.recs[i]
		if r.Attrs.IsControl() {
			continue // never delivered
		}
		func() {
			defer catch(&s.err)
			s.key, s.value, s.err = decodeKV(a.t, r.Key, r.Value)
		}()
		s.state.Store(slotDone)
	}
}

func (a *typedAhead[K, V]) clear() {
	clear(a.slots) // nothing decoded outlives its step
	a.slots = a.slots[:0]
	a.recs = nil
}

// take returns record i's decoded key and value (and the error decoding
// gave) if a worker has finished it. Otherwise it claims the record so
// that no worker starts it, and the caller decodes it itself.
func (a *typedAhead[K, V]) take(i int) (k K, v V, err error, ok bool) {
	s := &a.slots[i]
	if s.state.Load() == slotDone {
		return s.key, s.value, s.err, true
	}
	s.state.CompareAndSwap(slotFree, slotTaken)
	return k, v, nil, false
}

// aheadCursor is where a task's feed stands in a window: the delivery of
// the record being fed finds its decoding at the cursor, and a delivery of
// another record of the window (one the gate held and now releases) by
// its offset.
type aheadCursor struct {
	dec    aheadDecoder
	topic  headers.TopicID
	at     int   // index of the record being fed
	offset int64 // its offset
}

// locate returns the window index of d's record, or -1.
func (c *aheadCursor) locate(topic headers.TopicID, offset int64) int {
	if c.dec == nil || topic != c.topic {
		return -1
	}
	if offset == c.offset {
		return c.at
	}
	w := c.dec.window()
	i := sort.Search(len(w), func(i int) bool { return w[i].Offset >= offset })
	if i < len(w) && w[i].Offset == offset {
		return i
	}
	return -1
}

// decodeAhead runs the decoding workers. App.Run owns them: they start
// with the first step that has records to decode, wait parked between
// steps, and stop when Run returns (close). The step goroutine opens a
// step's windows (add, start) and closes them (finish) before the step
// ends; workers read the windows only between the two. Nothing decoded
// outlives its step.
type decodeAhead struct {
	workers int // 0: decode on the step goroutine only

	// Written by the step goroutine only while the windows are closed.
	wins []aheadDecoder

	gen    atomic.Uint64 // odd while a step's windows are open
	stop   atomic.Bool   // set by finish: leave the windows now
	parked atomic.Int32  // workers waiting on wake
	wake   chan struct{}
	done   chan struct{} // closed by close: workers return
	wg     sync.WaitGroup

	// A worker enters the windows under mu, only while gen is odd, and
	// finish makes gen even under mu: after that no worker enters, and
	// finish waits on left until the ones inside have left. A worker
	// leaves within the record it decodes, which may take as long as the
	// codec does (a remote schema lookup): finish sleeps meanwhile.
	mu   sync.Mutex
	busy int       // workers inside the windows
	left sync.Cond // signalled when busy drops to 0
}

// add makes recs the window of dec for this step. A source's second
// window in one step (its partition fetched twice in one poll) is not
// decoded ahead: the cursor knows one window per source.
func (d *decodeAhead) add(dec aheadDecoder, recs []*kgo.Record) {
	if dec == nil || dec.window() != nil || len(recs) == 0 {
		return
	}
	dec.reset(recs)
	d.wins = append(d.wins, dec)
}

// start opens the step's windows to the workers, starting them the first
// time.
func (d *decodeAhead) start() {
	if len(d.wins) == 0 {
		return
	}
	if d.done == nil {
		d.left.L = &d.mu
		d.wake = make(chan struct{}, d.workers)
		d.done = make(chan struct{})
		for range d.workers {
			d.wg.Go(d.run)
		}
	}
	d.gen.Add(1)
	for range d.parked.Load() {
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// finish closes the windows: it waits until no worker is inside them, and
// drops them.
func (d *decodeAhead) finish() {
	if len(d.wins) == 0 {
		return
	}
	d.stop.Store(true)
	d.mu.Lock()
	d.gen.Add(1)
	for d.busy != 0 {
		d.left.Wait()
	}
	d.mu.Unlock()
	d.stop.Store(false)
	for _, w := range d.wins {
		w.clear()
	}
	clear(d.wins)
	d.wins = d.wins[:0]
}

// close stops the workers and waits for them.
func (d *decodeAhead) close() {
	if d.done == nil {
		return
	}
	close(d.done)
	d.wg.Wait()
	d.done = nil
}

// run is a worker's loop: decode the open windows, then park until the
// next ones open.
func (d *decodeAhead) run() {
	var last uint64 // the windows this worker has done
	for {
		if g := d.gen.Load(); g%2 == 1 && g != last {
			d.mu.Lock()
			open := d.gen.Load() == g // finish has not closed them since
			if open {
				d.busy++
			}
			d.mu.Unlock()
			if open {
				for _, w := range d.wins {
					w.work(&d.stop)
				}
				d.mu.Lock()
				if d.busy--; d.busy == 0 {
					d.left.Broadcast()
				}
				d.mu.Unlock()
			}
			last = g
			continue
		}
		d.parked.Add(1)
		// start bumps gen before it reads parked: either it sees this
		// worker parked and wakes it, or this worker sees the new gen.
		if g := d.gen.Load(); g%2 == 1 && g != last {
			d.parked.Add(-1)
			continue
		}
		select {
		case <-d.wake:
		case <-d.done:
			d.parked.Add(-1)
			return
		}
		d.parked.Add(-1)
	}
}
