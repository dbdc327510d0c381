package view

import (
	"context"
	"testing"

	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A partition's records become visible only at a transaction's marker:
// a fetch that ends inside a transaction (its frontier written, its fold
// state not yet fetched) must not expose the half it has.
func TestApplyOnlyAtMarkers(t *testing.T) {
	v, err := New(Config{ApplicationID: "a", Stage: "s", Brokers: []string{"localhost:9092"}}, stage.String(), stage.Int64())
	if err != nil {
		t.Fatal(err)
	}
	v.parts[0] = newReplica(0)
	v.nparts = 1
	enc := func(n int64) []byte { b, _ := stage.Int64().Encode(n); return b }
	txn := kgo.NewRecordAttrs(kgo.RecordAttrsOpts{Transactional: true})
	put := func(key string, n, offset int64) *kgo.Record {
		return &kgo.Record{Key: []byte(key), Value: enc(n), Offset: offset, ProducerID: 1, Attrs: txn}
	}
	commit := kmsg.ControlRecordKey{Type: kmsg.ControlRecordKeyTypeCommit}
	ctrl := kgo.Record{Offset: 2, ProducerID: 1, Key: commit.AppendTo(nil)}
	ctrl.Attrs = kgo.NewRecordAttrs(kgo.RecordAttrsOpts{Control: true, Transactional: true})
	fetch := func(rs ...*kgo.Record) {
		t.Helper()
		if err := v.apply(context.Background(), kgo.FetchTopicPartition{FetchPartition: kgo.FetchPartition{Partition: 0, Records: rs, HighWatermark: 3}}); err != nil {
			t.Fatal(err)
		}
	}

	fetch(put("\x02k", 7, 0))
	if _, ok, err := v.Get("k"); ok || err != nil {
		t.Fatalf("a record before its transaction's marker is visible (ok %v, err %v)", ok, err)
	}
	fetch(put("\x02j", 8, 1), &ctrl)
	for k, want := range map[string]int64{"k": 7, "j": 8} {
		if got, ok, err := v.Get(k); err != nil || !ok || got != want {
			t.Fatalf("after the marker Get(%s) = %d, %v, %v; want %d", k, got, ok, err, want)
		}
	}
	if got := v.parts[0].applied(); got != 3 {
		t.Fatalf("applied = %d, want 3", got)
	}
	// A refetch of applied offsets changes nothing.
	fetch(put("\x02k", 1, 0), &ctrl)
	if got, _, _ := v.Get("k"); got != 7 {
		t.Fatalf("a refetched old record went back: k = %d", got)
	}
	if n := v.Len(); n != 2 {
		t.Fatalf("Len = %d, want 2", n)
	}
	// A control record that is no transaction marker stops the view
	// rather than guess whether its transaction committed.
	bad := kgo.Record{Offset: 3, ProducerID: 1, Key: []byte{0}, Attrs: ctrl.Attrs}
	if err := v.apply(context.Background(), kgo.FetchTopicPartition{FetchPartition: kgo.FetchPartition{Partition: 0, Records: []*kgo.Record{&bad}}}); err == nil {
		t.Fatal("a control record with an unreadable key was applied")
	}
}
