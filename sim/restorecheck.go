package sim

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
)

// restoreCheckEvery spaces the restore probes: they run after the first
// committed step of a node that holds records and after every
// restoreCheckEvery-th such step, so each scenario reaches them on most
// seeds at a fraction of the cost of probing every step. A counter, not
// the world's random source, chooses, so schedules stay what they were.
const restoreCheckEvery = 8

// checkRestore probes the two host faults the scheduler never makes on the
// real store, each against copies of the committed store (exactly what
// the next incarnation would restore), so the run itself is untouched:
//
//   - a corrupt or legacy store: a format version this build does not
//     know must be refused (ErrUnknownStateFormat), a version 1 store
//     restored as the version 2 one it encodes and rewritten as version
//     2, a hold queue whose entries disagree with its indices or whose
//     offsets do not rise above the frontier refused (ErrCorruptState),
//     and so a held entry cut short inside any field or with a byte
//     appended, and a scope whose input count runs past its value; the
//     committed store restored through a Batch that stages part of it
//     must restore exactly as the store does, and so must one whose head
//     entry gains a header with an empty value;
//     a frontier left below the queue's head raised by the head rule, and
//     a rescope dropping an input with held records refused
//     (ErrHeldOnRemovedInput), which no redeploy of a scenario does;
//   - a host breaking its feed contract: the same offset fed twice must be
//     refused (ErrOutOfOrderFeed, H1), and a record at or below a frontier
//     a reported position raised is dropped, never delivered (H2).
//
// The protocol's own tests pin each error too; these probes make the
// simulator judge them on the states real schedules reach.
func (n *SimNode) checkRestore() {
	if _, real := n.proto.(*protocol.Node); !real || n.cfg == nil || n.invBroken {
		return
	}
	n.restoreChecks++
	if n.restoreChecks%restoreCheckEvery != 1 {
		return
	}
	w := n.w
	fail := func(format string, args ...any) {
		n.invBroken = true
		w.Oracle.violate(Invariant, n.spec.Name, "restore probe: "+fmt.Sprintf(format, args...))
	}
	ref, err := n.rebuild(n.store.Clone())
	if err != nil {
		fail("rebuilding from the committed store: %v", err)
		return
	}
	want := ref.InputStates()
	refuses := func(what string, target error, corrupt func(*protocol.MemStore)) bool {
		st := n.store.Clone()
		corrupt(st)
		if _, err := n.rebuild(st); !errors.Is(err, target) {
			fail("a store with %s restored with %v, want %v", what, errString(err), target)
			return false
		}
		return true
	}

	// Format versions.
	if !refuses("format version 3", protocol.ErrUnknownStateFormat, func(st *protocol.MemStore) {
		_ = st.Put("v", []byte{0, 0, 0, 3})
	}) {
		return
	}
	legacy := n.store.Clone()
	_ = legacy.Put("v", []byte{0, 0, 0, 1})
	up, err := n.rebuild(legacy)
	if err != nil {
		fail("a version 1 store refused: %v", err)
		return
	}
	if got := up.InputStates(); !reflect.DeepEqual(got, want) {
		fail("a version 1 store restored as %+v, the version 2 one as %+v", got, want)
		return
	}
	if v, _, _ := legacy.Get("v"); !bytes.Equal(v, []byte{0, 0, 0, 2}) {
		fail("a version 1 store was not rewritten as version 2: version bytes %x", v)
		return
	}
	// A scope whose input count runs past its value, or cut short.
	if sv, ok, _ := n.store.Get("scope"); ok && len(sv) >= 8 {
		big := slices.Clone(sv)
		binary.BigEndian.PutUint32(big, binary.BigEndian.Uint32(big)+1000)
		if !refuses("a scope counting 1000 inputs more than it holds", protocol.ErrCorruptState, func(st *protocol.MemStore) { _ = st.Put("scope", big) }) ||
			!refuses("a scope cut short", protocol.ErrCorruptState, func(st *protocol.MemStore) { _ = st.Put("scope", sv[:len(sv)-1:len(sv)-1]) }) {
			return
		}
	}
	w.stats.RestoreProbes[probeVersion]++

	// The first held queue, by its store keys.
	i := slices.IndexFunc(want, func(s protocol.InputState) bool { return s.Held > 0 })
	if i < 0 {
		return
	}
	hs := want[i]
	ck := storeChanKey(hs.Channel)
	h, t, ok := decodeQueueMeta(n.store, ck)
	if !ok || t-h != int64(hs.Held) {
		fail("queue indices of %v do not match its %d held records", hs.Channel, hs.Held)
		return
	}
	entry := func(idx int64) string { return fmt.Sprintf("q/%s/e/%016x", ck, idx) }
	last, _, _ := n.store.Get(entry(t - 1))
	first, _, _ := n.store.Get(entry(h))
	probes := []struct {
		what    string
		corrupt func(*protocol.MemStore)
		applies bool
	}{
		{"the first held entry missing", func(st *protocol.MemStore) { _ = st.Delete(entry(h)) }, true},
		{"the last held entry missing", func(st *protocol.MemStore) { _ = st.Delete(entry(t - 1)) }, true},
		{"an entry past the tail index", func(st *protocol.MemStore) { _ = st.Put(entry(t), last) }, true},
		{"two held entries at one offset", func(st *protocol.MemStore) { _ = st.Put(entry(h+1), first) }, t-h >= 2},
		{"a frontier at the held head", func(st *protocol.MemStore) { _ = st.Put("f/"+ck, pair(hs.Head, -1)) }, true},
	}
	// The head entry's bytes cut short inside each of its fields (the
	// offset, the timestamp, the key's length and bytes, and the last
	// bytes, where the headers end), or with a byte appended: the decoder
	// must refuse each, never read past the value or accept the rest.
	cuts := []int{4, 12, 18, 21, len(first) / 2, len(first) - 3, len(first) - 1}
	for _, k := range cuts {
		if k > 0 && k < len(first) {
			probes = append(probes, struct {
				what    string
				corrupt func(*protocol.MemStore)
				applies bool
			}{fmt.Sprintf("the head entry cut to %d of its %d bytes", k, len(first)), func(st *protocol.MemStore) { _ = st.Put(entry(h), first[:k:k]) }, true})
		}
	}
	probes = append(probes, struct {
		what    string
		corrupt func(*protocol.MemStore)
		applies bool
	}{"the head entry with a trailing byte", func(st *protocol.MemStore) { _ = st.Put(entry(h), append(slices.Clip(first), 0)) }, true})
	for _, p := range probes {
		if p.applies && !refuses(p.what, protocol.ErrCorruptState, p.corrupt) {
			return
		}
	}
	// The restore names the queue's figures, so an operator can see which
	// side of a damaged queue is short.
	short := n.store.Clone()
	_ = short.Delete(entry(t - 1))
	if _, err := n.rebuild(short); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("indices claim %d held records, store has %d", t-h, t-h-1)) {
		fail("a store missing its last held entry of %d restored with %v, want the indices' and the store's counts", t-h, errString(err))
		return
	}
	// A rescope dropping the held input is refused (the records would be
	// lost), whether the queue's indices or only its entries say so.
	dropHeld := func(st *protocol.MemStore) (*protocol.Node, error) {
		cfg := *n.cfg
		cfg.Inputs = slices.DeleteFunc(slices.Clone(cfg.Inputs), func(c headers.Channel) bool { return c == hs.Channel })
		cfg.Store = st
		return protocol.New(context.Background(), cfg)
	}
	if _, err := dropHeld(n.store.Clone()); !errors.Is(err, protocol.ErrHeldOnRemovedInput) || !strings.Contains(err.Error(), fmt.Sprintf("%d held records", t-h)) {
		fail("a rescope dropping %v with %d held records restored with %v, want %v naming the count", hs.Channel, t-h, errString(err), protocol.ErrHeldOnRemovedInput)
		return
	}
	noMeta := n.store.Clone()
	_ = noMeta.Delete("q/" + ck + "/m")
	if _, err := dropHeld(noMeta); !errors.Is(err, protocol.ErrHeldOnRemovedInput) {
		fail("a rescope dropping %v, held entries without queue indices, restored with %v, want %v", hs.Channel, errString(err), protocol.ErrHeldOnRemovedInput)
		return
	}
	// Drained indices (head at the tail) hold nothing: that rescope folds.
	drained := n.store.Clone()
	for idx := h; idx < t; idx++ {
		_ = drained.Delete(entry(idx))
	}
	_ = drained.Put("q/"+ck+"/m", pair(t, t))
	if _, err := dropHeld(drained); err != nil {
		fail("a rescope dropping %v, its queue drained, refused: %v", hs.Channel, err)
		return
	}
	// A held record whose last header has an empty value (the protocol
	// keeps a host's headers as they came), re-encoded by the documented
	// layout (protocol/codec.go): it restores as the committed store does.
	if ext, ok := withEmptyHeader(first); ok {
		st := n.store.Clone()
		_ = st.Put(entry(h), ext)
		got, err := n.rebuild(st)
		if err != nil {
			fail("a held entry ending in an empty header value refused: %v", err)
			return
		}
		if gs := got.InputStates(); !reflect.DeepEqual(gs, want) {
			fail("a held entry ending in an empty header value restored as %+v, want %+v", gs, want)
			return
		}
	}
	// The same store restored through a Batch whose staged writes carry
	// part of it (a host restoring inside a step): the queue's first and
	// last entries and every other one staged only, the rest staged again
	// over the base; then a stray base entry past the tail that the batch
	// deletes. Each must restore exactly as the committed store does.
	for _, stray := range []bool{false, true} {
		base := n.store.Clone()
		b := protocol.NewBatch(base)
		for idx := h; idx < t; idx++ {
			v, _, _ := base.Get(entry(idx))
			if idx == h || idx == t-1 || (idx-h)%2 == 0 {
				_ = base.Delete(entry(idx))
			}
			_ = b.Put(entry(idx), v)
		}
		if stray {
			_ = base.Put(entry(t+5), last)
			_ = b.Delete(entry(t + 5))
		}
		got, err := n.rebuild(b)
		if err != nil {
			fail("a store staged in a batch (stray entry %v) refused: %v", stray, err)
			return
		}
		if gs := got.InputStates(); !reflect.DeepEqual(gs, want) {
			fail("a store staged in a batch (stray entry %v) restored as %+v, the committed one as %+v", stray, gs, want)
			return
		}
	}
	w.stats.RestoreProbes[probeQueue]++
	// A frontier below the head (the frontier is always flushed with the
	// queue, so only an older or damaged store has one): everything below
	// the head was delivered or skipped, and the restore says so.
	low := n.store.Clone()
	_ = low.Put("f/"+ck, pair(-1, -1))
	lr, err := n.rebuild(low)
	if err != nil {
		fail("a store whose frontier sits below the held head refused: %v", err)
		return
	}
	if got := lr.InputStates()[i].Frontier; got != hs.Head-1 {
		fail("a frontier below the head at %d restored as %d, want %d (the head rule)", hs.Head, got, hs.Head-1)
		return
	}
	w.stats.RestoreProbes[probeHeadRule]++

	n.probeFeeds(ref, want, fail)
}

// probeFeeds breaks the feed contract on nodes rebuilt from the committed
// store: ref (fresh) gets the next record of an input twice; a second
// fresh node gets a record after a reported position past it.
func (n *SimNode) probeFeeds(ref *protocol.Node, states []protocol.InputState, fail func(string, ...any)) {
	b := n.w.Broker
	for _, s := range states {
		e, off, ok := b.Next(s.Channel, n.pos[s.Channel])
		if !ok {
			continue
		}
		rec := func() *protocol.Record {
			return &protocol.Record{Coordinate: headers.Coordinate{Channel: s.Channel, Offset: off},
				Timestamp: e.Timestamp, Key: e.Key, Value: e.Value, Headers: e.Headers}
		}
		if _, err := ref.OnRecord(rec()); err != nil {
			return // a record the node refuses (an undecodable stamp): nothing to probe here
		}
		if _, err := ref.OnRecord(rec()); !errors.Is(err, protocol.ErrOutOfOrderFeed) {
			fail("offset %d of %v fed twice: the second feed returned %v, want %v", off, s.Channel, errString(err), protocol.ErrOutOfOrderFeed)
			return
		}
		n.w.stats.RestoreProbes[probeFeedTwice]++
		if s.Held > 0 || off <= s.Frontier {
			return
		}
		p, err := n.rebuild(n.store.Clone())
		if err != nil {
			fail("rebuilding from the committed store: %v", err)
			return
		}
		// The position says off was consumed; the record at it arriving
		// afterwards is at the frontier, a replay, and never delivered.
		if _, err := p.PositionAdvance(s.Channel, off+1); err != nil {
			fail("PositionAdvance(%v, %d): %v", s.Channel, off+1, err)
			return
		}
		ds, err := p.OnRecord(rec())
		if err != nil {
			fail("a record at the frontier after a position past it refused: %v", err)
			return
		}
		if slices.ContainsFunc(ds, func(d protocol.Delivery) bool { return d.Coordinate.Channel == s.Channel && d.Coordinate.Offset <= off }) {
			fail("offset %d of %v delivered after a position past it had folded the frontier onto it", off, s.Channel)
			return
		}
		if st := p.InputStates(); slices.ContainsFunc(st, func(x protocol.InputState) bool { return x.Channel == s.Channel && x.Held > 0 }) {
			fail("offset %d of %v held after a position past it had folded the frontier onto it", off, s.Channel)
			return
		}
		n.w.stats.RestoreProbes[probeBelowFrontier]++
		return
	}
}

// The restore probes, counted in Stats.RestoreProbes.
const (
	probeVersion       = iota // unknown version refused, version 1 upgraded
	probeQueue                // damaged hold queues refused
	probeHeadRule             // a frontier below the head raised to it
	probeFeedTwice            // the same offset fed twice refused
	probeBelowFrontier        // a record at a position-folded frontier dropped
	numRestoreProbes
)

// rebuild builds a node of n's incarnation on st.
func (n *SimNode) rebuild(st protocol.Store) (*protocol.Node, error) {
	cfg := *n.cfg
	cfg.Store = st
	// The simulated broker answers at once; nothing here blocks.
	return protocol.New(context.Background(), cfg)
}

// storeChanKey is a channel's text in the protocol's store keys (format
// version 2, protocol/codec.go): the topic ID's UUID text, a colon and the
// partition as ten decimal digits.
func storeChanKey(ch headers.Channel) string {
	return fmt.Sprintf("%s:%010d", ch.Topic.String(), uint32(ch.Partition))
}

func decodeQueueMeta(st *protocol.MemStore, ck string) (h, t int64, ok bool) {
	m, ok, _ := st.Get("q/" + ck + "/m")
	if !ok || len(m) != 16 {
		return 0, 0, false
	}
	return int64(binary.BigEndian.Uint64(m)), int64(binary.BigEndian.Uint64(m[8:])), true
}

func pair(a, b int64) []byte {
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(a)), uint64(b))
}

// positionAdvance reports pos on ch and judges the fold counter the
// protocol exports (Counters.PositionFolds, "frontier raises from a
// reported consumer position"): a call that raised ch's frontier over an
// empty queue counts a fold, and a call counts no more folds than inputs
// whose frontier rose (the cascade's drained queues fold too), so a
// position that changes nothing counts none.
func (n *SimNode) positionAdvance(p Protocol, ch headers.Channel, pos int64) ([]protocol.Delivery, error) {
	before, ok := inspect(p)
	c0 := p.Counters().PositionFolds
	ds, err := p.PositionAdvance(ch, pos)
	if err != nil || !ok || n.invBroken {
		return ds, err
	}
	after, _ := inspect(p)
	if len(after) != len(before) {
		return ds, err
	}
	var rose uint64
	raised := false
	for i := range before {
		if after[i].Frontier > before[i].Frontier {
			rose++
			raised = raised || (before[i].Channel == ch && before[i].Held == 0)
		}
	}
	if folds := p.Counters().PositionFolds - c0; folds > rose || (raised && folds == 0) {
		n.invBroken = true
		n.w.Oracle.violate(Invariant, n.spec.Name, fmt.Sprintf("PositionAdvance(%v, %d) counted %d folds, %d frontiers rose (%v's: %v)",
			ch, pos, folds, rose, ch, raised))
	}
	return ds, err
}

// withEmptyHeader returns a held entry's bytes with one more header, "u",
// whose value is empty (length 0), so the value ends in a zero length.
func withEmptyHeader(b []byte) ([]byte, bool) {
	p := 16
	for range 2 { // key, value
		if len(b) < p+4 {
			return nil, false
		}
		if n := int32(binary.BigEndian.Uint32(b[p:])); n > 0 {
			p += int(n)
		}
		p += 4
	}
	if len(b) < p+4 {
		return nil, false
	}
	c := int32(binary.BigEndian.Uint32(b[p:]))
	if c < 0 {
		c = 0
	}
	out := slices.Clone(b)
	binary.BigEndian.PutUint32(out[p:], uint32(c+1))
	out = binary.BigEndian.AppendUint32(out, 1)
	out = append(out, 'u')
	return binary.BigEndian.AppendUint32(out, 0), true
}
