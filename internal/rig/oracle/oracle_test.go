package oracle

import (
	"slices"
	"testing"
)

func TestExactlyOnceInOrder(t *testing.T) {
	want := map[string]bool{"a1": true, "a2": true, "b1": true}
	d := func(src, lane string, rank int64) Delivery {
		return Delivery{Source: src, At: "@" + src, Lane: lane, Rank: rank}
	}
	for _, tc := range []struct {
		name string
		ds   []Delivery
		want []Kind // kinds found, in the order returned
	}{
		{"correct", []Delivery{d("a1", "a", 1), d("b1", "b", 1), d("a2", "a", 2)}, nil},
		{"lanes are independent", []Delivery{d("b1", "b", 5), d("a1", "a", 1), d("a2", "a", 2)}, nil},
		{"lost", []Delivery{d("a1", "a", 1), d("b1", "b", 1)}, []Kind{Lost}},
		{"duplicated", []Delivery{d("a1", "a", 1), d("a1", "a", 1), d("a2", "a", 2), d("b1", "b", 1)}, []Kind{Duplicated}},
		{"unexpected", []Delivery{d("a1", "a", 1), d("x", "a", 9), d("a2", "a", 2), d("b1", "b", 1)}, []Kind{Unexpected}},
		{"order", []Delivery{d("a2", "a", 2), d("a1", "a", 1), d("b1", "b", 1)}, []Kind{Order}},
		{"equal rank is out of order", []Delivery{d("a1", "a", 1), d("a2", "a", 1), d("b1", "b", 1)}, []Kind{Order}},
		{"a duplicate does not move the lane", []Delivery{d("a1", "a", 1), d("a2", "a", 2), d("a1", "a", 1), d("b1", "b", 1)}, []Kind{Duplicated}},
		{"nothing delivered", nil, []Kind{Lost, Lost, Lost}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []Kind
			for _, f := range ExactlyOnceInOrder(want, tc.ds) {
				got = append(got, f.Kind)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("found %v, want %v", got, tc.want)
			}
		})
	}
}

func TestFindingsNameTheRecord(t *testing.T) {
	fs := ExactlyOnceInOrder(map[string]bool{"a1": true, "a2": true}, []Delivery{
		{Source: "a2", At: "p0@0", Lane: "a", Rank: 2}, {Source: "a1", At: "p0@1", Lane: "a", Rank: 1}, {Source: "a2", At: "p0@2", Lane: "a", Rank: 2},
	})
	if len(fs) != 2 {
		t.Fatalf("findings %v, want an order and a duplicate", fs)
	}
	if f := fs[0]; f.Kind != Order || f.Source != "a1" || f.At != "p0@1" || f.Prev != "a2" || f.Index != 1 {
		t.Errorf("order finding %+v", f)
	}
	if f := fs[1]; f.Kind != Duplicated || f.Source != "a2" || f.At != "p0@2" || f.Prev != "p0@0" || f.Index != 2 {
		t.Errorf("duplicate finding %+v", f)
	}
}
