package view

import (
	"errors"
	"testing"

	"github.com/parsley-go/parsley/stage"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A partition's records become visible only at a transaction's marker:
// a fetch that ends inside a transaction (its frontier written, its fold
// state not yet fetched) must not expose the half it has.
func TestApplyOnlyAtMarkers(t *testing.T) {
	v, err := New(Config{ApplicationID: "a", Stage: "s", Brokers: []string{"localhost:9092"}}, stage.String(), stage.Int64())
	if err != nil {
		t.Fatal(err)
	}
	v.parts[0] = &replica{kv: map[string][]byte{}}
	v.nparts = 1
	enc := func(n int64) []byte { b, _ := stage.Int64().Encode(n); return b }
	ctrl := kgo.Record{Offset: 2}
	ctrl.Attrs = kgo.NewRecordAttrs(kgo.RecordAttrsOpts{Control: true, Transactional: true})
	fetch := func(rs ...*kgo.Record) {
		v.apply(kgo.FetchTopicPartition{FetchPartition: kgo.FetchPartition{Partition: 0, Records: rs, HighWatermark: 3}})
	}

	fetch(&kgo.Record{Key: []byte("\x02k"), Value: enc(7), Offset: 0})
	if _, ok, err := v.Get("k"); ok || !errors.Is(err, ErrNotReady) {
		t.Fatalf("a record before its transaction's marker is visible (ok %v, err %v); want the replica not ready", ok, err)
	}
	fetch(&kgo.Record{Key: []byte("\x02j"), Value: enc(8), Offset: 1}, &ctrl)
	for k, want := range map[string]int64{"k": 7, "j": 8} {
		if got, ok, err := v.Get(k); err != nil || !ok || got != want {
			t.Fatalf("after the marker Get(%s) = %d, %v, %v; want %d", k, got, ok, err, want)
		}
	}
	if got := v.parts[0].applied; got != 3 {
		t.Fatalf("applied = %d, want 3", got)
	}
	// A refetch of applied offsets changes nothing.
	fetch(&kgo.Record{Key: []byte("\x02k"), Value: enc(1), Offset: 0}, &ctrl)
	if got, _, _ := v.Get("k"); got != 7 {
		t.Fatalf("a refetched old record went back: k = %d", got)
	}
	if n := v.Len(); n != 2 {
		t.Fatalf("Len = %d, want 2", n)
	}
}
