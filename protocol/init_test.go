package protocol

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/parsley-go/parsley/headers"
)

// A refused init changes nothing: plan reads and validates, and only a plan
// that passed reaches apply and persist. Each case starts from a store with
// state on every key kind (a frontier, an advertised clock, a mark, a held
// record, a send sequence, an acknowledged send, carried ancestry) and
// breaks one thing; several refusals come late in plan, after inputs are
// restored, so an apply that ran on what was read so far would show.
func TestRefusedInitChangesNothing(t *testing.T) {
	S := chn(31, 0)
	sender := SenderIDFor("app", "up", 0)
	stored := func(t *testing.T) *env {
		e := newEnv(t, []headers.Channel{a0, b0, c0}, []headers.TopicID{S.Topic})
		n := e.node()
		feed(t, n, rec(t, a0, 0, st{sender: &sender, seq: 0}))
		feed(t, n, rec(t, b0, 3, st{offs: []headers.OffsetEntry{off(a0, 5)}})) // held
		feed(t, n, plain(c0, 0))
		prepare(t, n, S)
		if err := n.Sent(headers.Coordinate{Channel: S, Offset: 0}); err != nil {
			t.Fatal(err)
		}
		flush(t, n)
		// A shrink and regrowth leave carried ancestry behind.
		e.cfg.Inputs = []headers.Channel{a0, b0}
		e.node()
		e.cfg.Inputs = []headers.Channel{a0, b0, c0}
		e.node()
		return e
	}
	put := func(k string, v []byte) func(*env) {
		return func(e *env) {
			if err := e.store.Put(k, v); err != nil {
				e.t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct {
		name   string
		break_ func(*env)
		want   error
	}{
		{"unknown version", put(keyVersion, []byte{0, 0, 0, 99}), ErrUnknownStateFormat},
		{"corrupt scope", put(keyScope, []byte{1}), ErrCorruptState},
		{"corrupt carried", put(keyCarried, []byte{1, 0, 0}), ErrCorruptState},
		{"corrupt frontier", put(pfxFront+chanKey(c0), []byte{1}), ErrCorruptState},
		{"corrupt mark", put(dsKey(chanKey(a0), sender), []byte{1}), ErrCorruptState},
		{"corrupt queue indices", put(metaKey(chanKey(b0)), appendInt64(appendInt64(nil, 2), 1)), ErrCorruptState},
		{"corrupt send sequence", put(pfxSeq+chanKey(S), []byte{1}), ErrCorruptState},
		{"corrupt acknowledged send", put(pfxAcked+chanKey(S), []byte{1}), ErrCorruptState},
		{"held on a removed input", func(e *env) { e.cfg.Inputs = []headers.Channel{a0, c0} }, ErrHeldOnRemovedInput},
		{"sink missing", func(e *env) { e.offs.gone[S.Topic] = true }, ErrSinkMissing},
		{"broker error", func(e *env) { e.offs.err = errors.New("broker down") }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := stored(t)
			tc.break_(e)
			before := e.store.Entries()
			if err := checkConfig(&e.cfg); err != nil {
				t.Fatal(err)
			}
			n, untouched := build(&e.cfg, e.sab), build(&e.cfg, e.sab)
			p, err := n.plan(context.Background())
			if err == nil || p != nil {
				t.Fatalf("plan accepted a broken store: %v", err)
			}
			if tc.want != nil {
				wantErr(t, err, tc.want)
			}
			if !reflect.DeepEqual(n, untouched) {
				t.Fatal("a refused plan changed the node")
			}
			if _, err := newNode(context.Background(), e.cfg, e.sab); err == nil {
				t.Fatal("New accepted a broken store")
			}
			if !reflect.DeepEqual(before, e.store.Entries()) {
				t.Fatal("a refused init wrote to the store")
			}
		})
	}
}

// plan touches nothing even when it succeeds; apply and persist then give
// the node New gives.
func TestPlanApplyPersistIsNew(t *testing.T) {
	e := newEnv(t, []headers.Channel{a0, b0}, nil)
	n := e.node()
	feed(t, n, rec(t, b0, 3, st{offs: []headers.OffsetEntry{off(a0, 0)}}))
	flush(t, n)
	e.cfg.Inputs = []headers.Channel{a0, b0, c0}
	store := e.store.Clone()
	m, untouched := build(&e.cfg, e.sab), build(&e.cfg, e.sab)
	p, err := m.plan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(m, untouched) {
		t.Fatal("plan changed the node")
	}
	m.apply(p)
	if err := m.persist(p); err != nil {
		t.Fatal(err)
	}
	e.cfg.Store = store
	want, err := newNode(context.Background(), e.cfg, e.sab)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(e.store.Entries(), store.Entries()) {
		t.Fatal("plan, apply, persist wrote other bytes than New")
	}
	if got, w := m.ResumePositions(), want.ResumePositions(); !reflect.DeepEqual(got, w) {
		t.Fatalf("resume positions %v, New gives %v", got, w)
	}
}
