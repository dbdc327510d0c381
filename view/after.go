package view

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/internal/state"
)

// ErrNotYet is wrapped by the error GetAfter returns when its context ends
// before the owning task delivered the token.
var ErrNotYet = errors.New("view: the owning task has not delivered the token yet")

// Awaited is one claim of a token the owning task had not delivered.
type Awaited struct {
	Channel headers.Channel
	// Offset is the token's offset on the channel (for a sequence claim,
	// Seq and Sender say which send; Offset is -1).
	Offset int64
	Sender headers.SenderID
	Seq    int64
	// Frontier is the task's committed frontier on the channel: every
	// offset at or below it was delivered or skipped (-1 for none).
	Frontier int64
	// Held: the record is in the task's committed hold queue (the gate
	// waits for one of its causes); otherwise the task has not fetched
	// it, or fetched it in a step that has not committed.
	Held bool
	// NotStarted: the task has committed no state yet, so the view cannot
	// tell whether it consumes the channel.
	NotStarted bool
}

func (a Awaited) String() string {
	var b strings.Builder
	if a.Offset >= 0 {
		fmt.Fprintf(&b, "%s offset %d", a.Channel, a.Offset)
	} else {
		fmt.Fprintf(&b, "%s sender %s seq %d", a.Channel, a.Sender, a.Seq)
	}
	switch {
	case a.NotStarted:
		b.WriteString(" (the task has committed no state yet)")
	case a.Held:
		fmt.Fprintf(&b, " (held in the gate; delivered up to %d)", a.Frontier)
	default:
		fmt.Fprintf(&b, " (not yet fetched; delivered up to %d)", a.Frontier)
	}
	return b.String()
}

// WaitError is GetAfter's error when its context ended first: which task
// and what of the token it still waits for, or that the view's Run was not
// running. It wraps ErrNotYet and the context's error; when NotRunning, also
// ErrNotRunning and what the last Run returned.
type WaitError struct {
	Topic string
	// Partition is the task partition that owns the key, or -1 when the
	// view has not listed the changelog's partitions yet.
	Partition int32
	Key       []byte
	// Awaiting are the token's claims the task had not delivered (none
	// when NotRunning).
	Awaiting []Awaited
	// NotRunning: the view's Run was not running when the wait ended —
	// it had not started, or had returned (Stopped says with what) — so
	// the view could not tell.
	NotRunning bool
	Stopped    error
	Err        error // the context's error
}

func (e *WaitError) Error() string {
	if e.NotRunning {
		why := "Run has not started"
		if e.Stopped != nil {
			why = "Run returned: " + e.Stopped.Error()
		}
		return fmt.Sprintf("view: key %q of %s waits for the view to run (%s): %v", e.Key, e.Topic, why, e.Err)
	}
	parts := make([]string, len(e.Awaiting))
	for i, a := range e.Awaiting {
		parts[i] = a.String()
	}
	return fmt.Sprintf("view: key %q (%s[%d]) waits for %s: %v", e.Key, e.Topic, e.Partition, strings.Join(parts, "; "), e.Err)
}

// Unwrap returns ErrNotYet, the context's error and, when NotRunning,
// ErrNotRunning and what the last Run returned.
func (e *WaitError) Unwrap() []error {
	errs := []error{ErrNotYet, e.Err}
	if e.NotRunning {
		errs = append(errs, ErrNotRunning)
		if e.Stopped != nil {
			errs = append(errs, e.Stopped)
		}
	}
	return errs
}

// GetAfter returns the key's state once the task that owns the key has
// delivered every claim of tok on a channel it consumes: an offset entry
// once its frontier on the channel reached the offset, a sequence entry
// once it delivered the sender's sequence. Claims on channels the task
// does not consume are not waited for (see docs/views.md). The state it
// returns is that of a committed step at or after the one that delivered
// the token, never an older one. When ctx ends first it returns a
// *WaitError naming what it still waits for.
//
// A token read needs Run: while Run is not running (not started yet, or
// returned and not run again) GetAfter waits for it, and if ctx ends first
// the *WaitError says so (NotRunning, wrapping ErrNotRunning and what Run
// returned). A closed view fails at once with ErrClosed, also for the calls
// waiting when Close is called.
func (v *View[K, S]) GetAfter(ctx context.Context, tok Token, key K) (S, bool, error) {
	var zero S
	kb, err := v.keys.Encode(key)
	if err != nil {
		return zero, false, fmt.Errorf("view: encode key: %w", err)
	}
	for {
		v.mu.RLock()
		ch := v.changed
		running, closed, stopped := v.running, v.closed, v.stopped
		p := v.owner(kb)
		r := v.parts[p]
		var (
			awaiting []Awaited
			b        []byte
			ok       bool
		)
		if r != nil {
			awaiting, err = pendingClaims(r.kv, tok)
			if err == nil && len(awaiting) == 0 {
				b, ok = r.kv[state.FoldKey(kb)]
			}
		}
		v.mu.RUnlock()
		switch {
		case closed:
			return zero, false, fmt.Errorf("view: key %q: %w", kb, ErrClosed)
		case !running:
			// Wait for Run: until it lists the changelog the owner is
			// unknown, and a stopped view follows nothing.
		case r == nil:
			return zero, false, fmt.Errorf("%w: key %q is owned by %s[%d]", ErrNotReplicated, kb, v.topic, p)
		case err != nil:
			return zero, false, fmt.Errorf("view: %s[%d]: %w", v.topic, p, err)
		case len(awaiting) == 0:
			return v.decode(kb, b, ok)
		}
		select {
		case <-ctx.Done():
			if !running {
				return zero, false, &WaitError{Topic: v.topic, Partition: p, Key: kb, NotRunning: true, Stopped: stopped, Err: ctx.Err()}
			}
			return zero, false, &WaitError{Topic: v.topic, Partition: p, Key: kb, Awaiting: awaiting, Err: ctx.Err()}
		case <-ch:
		}
	}
}

// pendingClaims returns the claims of tok that the task whose committed
// state is kv has not delivered, on the channels it consumes.
func pendingClaims(kv map[string][]byte, tok Token) ([]Awaited, error) {
	if tok.IsEmpty() {
		return nil, nil
	}
	ts := readTask(kv)
	if err := ts.checkVersion(); err != nil {
		return nil, err
	}
	ins, started, err := ts.inputs()
	if err != nil {
		return nil, err
	}
	var out []Awaited
	for e := range tok.clk.OffsetEntries() {
		if !started {
			out = append(out, Awaited{Channel: e.Channel, Offset: e.Offset, Frontier: -1, NotStarted: true})
			continue
		}
		if !ins[e.Channel] {
			continue
		}
		f, err := ts.frontier(e.Channel)
		if err != nil {
			return nil, err
		}
		if f >= e.Offset {
			continue
		}
		h, err := ts.held(e.Channel, e.Offset)
		if err != nil {
			return nil, err
		}
		out = append(out, Awaited{Channel: e.Channel, Offset: e.Offset, Frontier: f, Held: h})
	}
	for e := range tok.clk.SeqEntries() {
		if !started {
			out = append(out, Awaited{Channel: e.Channel, Offset: -1, Sender: e.Sender, Seq: e.Seq, Frontier: -1, NotStarted: true})
			continue
		}
		if !ins[e.Channel] {
			continue
		}
		d, err := ts.deliveredSeq(e.Channel, e.Sender)
		if err != nil {
			return nil, err
		}
		if d >= e.Seq {
			continue
		}
		f, err := ts.frontier(e.Channel)
		if err != nil {
			return nil, err
		}
		out = append(out, Awaited{Channel: e.Channel, Offset: -1, Sender: e.Sender, Seq: e.Seq, Frontier: f})
	}
	return out, nil
}
