package protocol

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/parsley-go/parsley/headers"
)

// Each guard refuses rather than guesses, with a typed error, and a refused
// call changes nothing.

func TestFailClosedUndecodableStamp(t *testing.T) {
	e := newEnv(t, []headers.Channel{a0, b0}, nil)
	n := e.node()
	feed(t, n, rec(t, b0, 0, st{offs: []headers.OffsetEntry{off(a0, 1)}}))
	bad := plain(a0, 1)
	bad.Headers = []headers.Header{{Key: headers.HeaderVC, Value: []byte{1, 0, 0}}}
	before := n.Counters()
	_, err := n.OnRecord(bad)
	wantErr(t, err, headers.ErrUndecodable)
	var pe *Error
	errors.As(err, &pe)
	if pe.Channel != a0 || pe.Offset != 1 {
		t.Fatalf("error does not name the coordinate: %v", err)
	}
	if n.Counters() != before {
		t.Fatal("a refused record changed the counters")
	}
	// Nothing changed: the same offset, decodable, is accepted and releases b@0.
	wantCoords(t, "retry", feed(t, n, plain(a0, 1)), at(a0, 1), at(b0, 0))
}

func TestFailClosedUndeclaredChannel(t *testing.T) {
	n := newEnv(t, []headers.Channel{a0}, nil).node()
	_, err := n.OnRecord(plain(b0, 0))
	wantErr(t, err, ErrUndeclaredChannel)
	_, err = n.PositionAdvance(b0, 4)
	wantErr(t, err, ErrUndeclaredChannel)
	wantCoords(t, "still usable", feed(t, n, plain(a0, 0)), at(a0, 0))
}

func TestFailClosedUndeclaredSink(t *testing.T) {
	S := chn(31, 0)
	n := newEnv(t, nil, []headers.TopicID{S.Topic}).node()
	_, err := n.PrepareSend(chn(32, 0))
	wantErr(t, err, ErrUndeclaredSink)
	_, err = n.PrepareSend(headers.Channel{Topic: S.Topic, Partition: -1})
	wantErr(t, err, ErrUndeclaredSink)
	if s := prepare(t, n, S); s.Seq != 0 {
		t.Fatalf("a refused send consumed a sequence: %d", s.Seq)
	}
}

func TestFailClosedOutOfOrderFeed(t *testing.T) {
	n := newEnv(t, []headers.Channel{a0, b0}, nil).node()
	feed(t, n, rec(t, a0, 5, st{offs: []headers.OffsetEntry{off(b0, 0)}})) // held
	for _, o := range []int64{5, 4} {
		_, err := n.OnRecord(plain(a0, o))
		wantErr(t, err, ErrOutOfOrderFeed)
	}
	_, err := n.OnRecord(plain(a0, -1))
	wantErr(t, err, ErrInvalidRecord)
	if c := n.Counters(); c.Held != 1 {
		t.Fatalf("held %d", c.Held)
	}
	wantCoords(t, "in order", feed(t, n, plain(a0, 6)))
}

func TestFailClosedHeldRecordOnRemovedInput(t *testing.T) {
	e := newEnv(t, []headers.Channel{a0, b0}, nil)
	n := e.node()
	feed(t, n, rec(t, b0, 3, st{offs: []headers.OffsetEntry{off(a0, 0)}}))
	flush(t, n)
	before := e.store.Entries()
	e.cfg.Inputs = []headers.Channel{a0}
	_, err := New(context.Background(), e.cfg)
	wantErr(t, err, ErrHeldOnRemovedInput)
	var pe *Error
	if errors.As(err, &pe); pe.Channel != b0 {
		t.Fatalf("error does not name the channel: %v", err)
	}
	if !reflect.DeepEqual(before, e.store.Entries()) {
		t.Fatal("a refused init wrote to the store")
	}
}

func TestFailClosedFewerHeldEntriesThanIndicesClaim(t *testing.T) {
	e := newEnv(t, []headers.Channel{a0, b0}, nil)
	n := e.node()
	feed(t, n, rec(t, b0, 3, st{offs: []headers.OffsetEntry{off(a0, 0)}}))
	feed(t, n, plain(b0, 4))
	feed(t, n, plain(b0, 5))
	flush(t, n)
	if err := e.store.Delete(entryKey(chanKey(b0), 1)); err != nil {
		t.Fatal(err)
	}
	_, err := New(context.Background(), e.cfg)
	wantErr(t, err, ErrCorruptState)
	// The tail entry missing too.
	e2 := newEnv(t, []headers.Channel{a0, b0}, nil)
	n = e2.node()
	feed(t, n, rec(t, b0, 3, st{offs: []headers.OffsetEntry{off(a0, 0)}}))
	flush(t, n)
	if err := e2.store.Delete(entryKey(chanKey(b0), 0)); err != nil {
		t.Fatal(err)
	}
	_, err = New(context.Background(), e2.cfg)
	wantErr(t, err, ErrCorruptState)
}

func TestFailClosedCorruptHeldEntry(t *testing.T) {
	e := newEnv(t, []headers.Channel{a0, b0}, nil)
	n := e.node()
	feed(t, n, rec(t, b0, 3, st{offs: []headers.OffsetEntry{off(a0, 0)}}))
	flush(t, n)
	k := entryKey(chanKey(b0), 0)
	v, ok, _ := e.store.Get(k)
	if !ok {
		t.Fatal("precondition: b@3 is held and flushed")
	}
	for _, bad := range [][]byte{v[:len(v)-1], append(append([]byte{}, v...), 0)} {
		if err := e.store.Put(k, bad); err != nil {
			t.Fatal(err)
		}
		_, err := New(context.Background(), e.cfg)
		wantErr(t, err, ErrCorruptState)
	}
}

func TestFailClosedUnknownStateFormat(t *testing.T) {
	for _, tt := range []struct {
		name string
		key  string
		val  []byte
	}{
		{"future version", keyVersion, []byte{0, 0, 0, 3}},
		{"malformed version", keyVersion, []byte{1}},
		{"state without version", keyScope, encodeScope(scope{})},
		{"held entry without version", pfxQueue + chanKey(a0) + "/m", make([]byte, 16)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, []headers.Channel{a0}, nil)
			if err := e.store.Put(tt.key, tt.val); err != nil {
				t.Fatal(err)
			}
			_, err := New(context.Background(), e.cfg)
			wantErr(t, err, ErrUnknownStateFormat)
		})
	}
}

func TestFailClosedInvalidConfig(t *testing.T) {
	for name, mod := range map[string]func(*Config){
		"no store":        func(c *Config) { c.Store = nil },
		"no offsets":      func(c *Config) { c.Offsets = nil },
		"duplicate input": func(c *Config) { c.Inputs = []headers.Channel{a0, a0} },
		"zero topic":      func(c *Config) { c.Inputs = []headers.Channel{{}} },
		"duplicate sink":  func(c *Config) { c.Sinks = []headers.TopicID{tid(31), tid(31)} },
		"negative part":   func(c *Config) { c.Partition = -1 },
	} {
		e := newEnv(t, []headers.Channel{a0}, nil)
		mod(&e.cfg)
		_, err := New(context.Background(), e.cfg)
		if !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestFailClosedMissingSink(t *testing.T) {
	e := newEnv(t, nil, []headers.TopicID{tid(31)})
	e.offs.gone[tid(31)] = true
	_, err := New(context.Background(), e.cfg)
	wantErr(t, err, ErrSinkMissing)
}

// failingStore fails every write after the first `ok` writes.
type failingStore struct {
	*MemStore
	ok int
}

var errDisk = errors.New("disk full")

func (f *failingStore) Put(k string, v []byte) error {
	if f.ok == 0 {
		return errDisk
	}
	f.ok--
	return f.MemStore.Put(k, v)
}

func TestStoreErrorFailsTheNode(t *testing.T) {
	fs := &failingStore{MemStore: NewMemStore(), ok: 100}
	e := newEnv(t, []headers.Channel{a0, b0}, nil)
	e.cfg.Store = fs
	n := e.node()
	feed(t, n, rec(t, b0, 3, st{offs: []headers.OffsetEntry{off(a0, 0)}}))
	fs.ok = 0
	err := n.Flush()
	wantErr(t, err, errDisk)
	_, err = n.OnRecord(plain(a0, 0))
	wantErr(t, err, ErrNodeFailed)
}
