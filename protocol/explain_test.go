package protocol

import (
	"reflect"
	"testing"

	"github.com/parsley-go/parsley/headers"
)

func TestExplainHoldsDiagnoses(t *testing.T) {
	d0 := chn(4, 0)
	n := newEnv(t, []headers.Channel{a0, b0, c0, d0}, nil).node()
	s, u := headers.SenderID{7}, headers.SenderID{8}
	// b@3 is held on a@10 (fetched below, not yet: NOT_FETCHED) and on
	// sender u's seq 0 on c (never seen: SENDER_UNSEEN).
	feed(t, n, rec(t, b0, 3, st{offs: []headers.OffsetEntry{off(a0, 10), off(x0, 4)}, seqs: []headers.SeqEntry{sq(c0, u, 0)}}))
	// c@0 from s, seq 0, delivered; c@1 from s, seq 1, held on d@5 (a0's
	// head claims s's seq 1 on c: HELD_UPSTREAM) ...
	feed(t, n, rec(t, c0, 0, st{sender: &s, seq: 0}))
	feed(t, n, rec(t, c0, 1, st{offs: []headers.OffsetEntry{off(d0, 5)}, sender: &s, seq: 1}))
	// ... a@2 is held on s's seq 2 on c (ahead of delivered seq 0, not
	// held: SENDER_BEHIND) and on c@1 (fetched, held: HELD_UPSTREAM).
	feed(t, n, rec(t, a0, 2, st{offs: []headers.OffsetEntry{off(c0, 1)}, seqs: []headers.SeqEntry{sq(c0, s, 2)}}))
	feed(t, n, plain(a0, 3))
	hs, err := n.ExplainHolds()
	if err != nil {
		t.Fatal(err)
	}
	want := []Hold{
		{Coordinate: at(a0, 2), Timestamp: 1002, Depth: 2, Waiting: []Claim{
			{Diagnosis: HeldUpstream, Channel: c0, Offset: 1, Seq: -1, DeliveredSeq: -1, Frontier: 0, Position: 2},
			{Diagnosis: SenderBehind, Channel: c0, Offset: -1, Sequence: true, Sender: s, Seq: 2, DeliveredSeq: 0, Frontier: 0, Position: 2},
		}},
		{Coordinate: at(b0, 3), Timestamp: 1003, Depth: 1, Waiting: []Claim{
			{Diagnosis: NotFetched, Channel: a0, Offset: 10, Seq: -1, DeliveredSeq: -1, Frontier: 1, Position: 4},
			{Diagnosis: SenderUnseen, Channel: c0, Offset: -1, Sequence: true, Sender: u, Seq: 0, DeliveredSeq: -1, Frontier: 0, Position: 2},
		}},
		{Coordinate: at(c0, 1), Timestamp: 1001, Depth: 1, Waiting: []Claim{
			{Diagnosis: NotFetched, Channel: d0, Offset: 5, Seq: -1, DeliveredSeq: -1, Frontier: -1, Position: 0},
		}},
	}
	if !reflect.DeepEqual(hs, want) {
		t.Fatalf("ExplainHolds\n got %+v\nwant %+v", hs, want)
	}
	// A sequence claim whose record is fetched and held reads HELD_UPSTREAM.
	n2 := newEnv(t, []headers.Channel{a0, b0, c0}, nil).node()
	feed(t, n2, rec(t, b0, 0, st{offs: []headers.OffsetEntry{off(c0, 9)}, sender: &s, seq: 4}))
	feed(t, n2, rec(t, a0, 0, st{seqs: []headers.SeqEntry{sq(b0, s, 4)}}))
	hs, _ = n2.ExplainHolds()
	if len(hs) != 2 || hs[0].Waiting[0].Diagnosis != HeldUpstream {
		t.Fatalf("%+v", hs)
	}
	for d, code := range map[Diagnosis]string{NotFetched: "vc-hold-not-fetched", HeldUpstream: "vc-hold-held-upstream", SenderUnseen: "vc-hold-sender-unseen", SenderBehind: "vc-hold-sender-behind"} {
		if d.String() != code {
			t.Errorf("%d.String() = %s", d, d)
		}
	}
}

func TestBatchOverlaysAndCommits(t *testing.T) {
	base := NewMemStore()
	for _, k := range []string{"a", "b/1", "b/2", "c"} {
		_ = base.Put(k, []byte(k))
	}
	b := NewBatch(base)
	_ = b.Put("b/0", []byte("new"))
	_ = b.Delete("b/1")
	_ = b.Put("b/2", []byte("changed"))
	_ = b.Put("b/3", nil)
	var got []string
	_ = b.Scan("b/", func(k string, v []byte) error { got = append(got, k+"="+string(v)); return nil })
	if want := []string{"b/0=new", "b/2=changed", "b/3="}; !reflect.DeepEqual(got, want) {
		t.Fatalf("scan %v want %v", got, want)
	}
	if v, ok, _ := b.Get("b/1"); ok || v != nil {
		t.Fatal("deleted key visible")
	}
	if _, ok, _ := base.Get("b/0"); ok {
		t.Fatal("batch wrote through before Commit")
	}
	ms := b.Mutations()
	if len(ms) != 4 || ms[0].Key != "b/0" || !ms[1].Delete || ms[3].Key != "b/3" {
		t.Fatalf("mutations %+v", ms)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if len(b.Mutations()) != 0 {
		t.Fatal("commit kept mutations")
	}
	got = nil
	_ = base.Scan("", func(k string, v []byte) error { got = append(got, k+"="+string(v)); return nil })
	if want := []string{"a=a", "b/0=new", "b/2=changed", "b/3=", "c=c"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("after commit %v", got)
	}
	d := NewBatch(base)
	_ = d.Put("z", []byte("z"))
	d.Discard()
	if _, ok, _ := d.Get("z"); ok {
		t.Fatal("discard kept a write")
	}
}

// TestCrashedStepLeavesCommittedStateOnly drives a node over a Batch the
// way a host does (H3): a step whose batch is discarded is invisible to the
// node rebuilt from committed state.
func TestCrashedStepLeavesCommittedStateOnly(t *testing.T) {
	committed := NewMemStore()
	e := newEnv(t, []headers.Channel{a0, b0}, nil)
	step := func(fn func(n *Node), commit bool) {
		b := NewBatch(committed)
		e.cfg.Store = b
		n := e.node()
		fn(n)
		flush(t, n)
		if commit {
			if err := b.Commit(); err != nil {
				t.Fatal(err)
			}
		}
	}
	step(func(n *Node) { feed(t, n, rec(t, b0, 0, st{offs: []headers.OffsetEntry{off(a0, 0)}})) }, true)
	step(func(n *Node) { wantCoords(t, "crashed step", feed(t, n, plain(a0, 0)), at(a0, 0), at(b0, 0)) }, false)
	step(func(n *Node) { wantCoords(t, "redo", feed(t, n, plain(a0, 0)), at(a0, 0), at(b0, 0)) }, true)
	step(func(n *Node) {
		if c := n.Counters(); c.Held != 0 {
			t.Fatalf("held %d after committed redo", c.Held)
		}
	}, true)
}

func TestFlushWorkIsProportionalToNewHolds(t *testing.T) {
	for _, depth := range []int{10, 1000} {
		ns := &nullStore{}
		e := newEnv(t, []headers.Channel{a0, b0}, nil)
		e.cfg.Store = ns
		n := e.node()
		o := int64(0)
		hold := func(k int) {
			for range k {
				if _, err := n.OnRecord(rec(t, b0, o, st{offs: []headers.OffsetEntry{off(a0, 0)}})); err != nil {
					t.Fatal(err)
				}
				o++
			}
		}
		hold(depth)
		flush(t, n)
		ns.puts = 0
		hold(5)
		flush(t, n)
		// 5 entries, the queue indices, the advertised clock of b.
		if ns.puts != 7 {
			t.Fatalf("depth %d: flush after 5 new holds wrote %d keys, want 7", depth, ns.puts)
		}
		if len(n.inputs[1].q.pending) != 0 || n.inputs[1].q.loaded && n.inputs[1].q.head.Offset != 0 {
			t.Fatal("held records kept in memory after flush")
		}
	}
}

// TestBatchStaged: Staged reports only this batch's own writes, a Delete
// as a Delete, and hands back the very slice Put kept (stage's fold state
// copies it before a codec may update it in place, storewrites.go).
func TestBatchStaged(t *testing.T) {
	base := NewMemStore()
	_ = base.Put("committed", []byte("old"))
	_ = base.Put("gone", []byte("old"))
	b := NewBatch(base)
	put := []byte("new")
	_ = b.Put("written", put)
	_ = b.Delete("gone")
	for _, tc := range []struct {
		key    string
		staged bool
		delete bool
		value  string
	}{
		{"written", true, false, "new"},
		{"gone", true, true, ""},
		{"committed", false, false, ""},
		{"absent", false, false, ""},
	} {
		m, ok := b.Staged(tc.key)
		if ok != tc.staged || m.Delete != tc.delete || string(m.Value) != tc.value {
			t.Errorf("Staged(%q) = %+v, %v; want staged %v, delete %v, value %q", tc.key, m, ok, tc.staged, tc.delete, tc.value)
		}
	}
	if m, _ := b.Staged("written"); &m.Value[0] != &put[0] {
		t.Error("Staged copied the write; its doc says it shares the slice Put kept")
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Staged("written"); ok {
		t.Error("a committed batch still reports a staged write")
	}
}

// TestBatchBase: Base reads under the batch's own writes, so a read that
// Staged has already missed can skip the batch (stage's fold state and
// committed reads do): it sees the base's value where the batch has
// overwritten or deleted the key.
func TestBatchBase(t *testing.T) {
	base := NewMemStore()
	_ = base.Put("k", []byte("old"))
	_ = base.Put("gone", []byte("old"))
	b := NewBatch(base)
	_ = b.Put("k", []byte("new"))
	_ = b.Delete("gone")
	for _, key := range []string{"k", "gone"} {
		v, ok, err := b.Base().Get(key)
		if err != nil || !ok || string(v) != "old" {
			t.Errorf("Base().Get(%q) = %q, %v, %v; want the base's \"old\"", key, v, ok, err)
		}
	}
	if v, _, _ := b.Get("k"); string(v) != "new" {
		t.Errorf("Get(k) = %q, want the staged \"new\"", v)
	}
}
