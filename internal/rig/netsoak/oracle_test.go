package netsoak

import (
	"fmt"
	"slices"
	"testing"
)

// world builds a small correct run: inputs on two partitions, one aborted,
// and the outputs a correct pipeline writes for them.
func world() (*Truth, *Observed) {
	t := &Truth{}
	keys := []string{"a", "b", "a", "c", "b", "a"}
	next := map[int32]int64{}
	for g, k := range keys {
		p := int32(len(k) + g%2 - 1)
		t.Inputs = append(t.Inputs, Input{G: int64(g + 1), Key: k, Topic: "orders", Partition: p, Offset: next[p], Committed: g != 3})
		next[p] += 2 // a marker after each
	}
	o := &Observed{}
	count := map[string]int64{}
	outNext := map[int32]int64{}
	for _, in := range t.Inputs {
		if !in.Committed {
			continue
		}
		count[in.Key]++
		out := Output{Partition: in.Partition, Offset: outNext[in.Partition], Src: in.Coord(), G: in.G, Key: in.Key, N: count[in.Key], From: in.Coord()}
		outNext[in.Partition]++
		o.Settled = append(o.Settled, out)
	}
	for i, s := range o.Settled {
		a := s
		a.From = coord("settled", s.Partition, s.Offset)
		a.Offset = int64(i)
		o.Audited = append(o.Audited, a)
		st := s
		st.From = coord("audited", a.Partition, a.Offset)
		st.Offset = int64(i + 1)
		o.Stream = append(o.Stream, st)
	}
	return t, o
}

func TestJudgeAcceptsACorrectRun(t *testing.T) {
	tr, o := world()
	v := Judge(tr, o)
	if !v.OK() {
		t.Fatalf("violations on a correct run: %v", v.Violations)
	}
	if v.Committed != 5 || v.Aborted != 1 || v.Settled != 5 || v.Streamed != 5 {
		t.Fatalf("counts: %s", v.Summary())
	}
}

// TestJudgeCatchesBrokenRuns proves each check fails on the input it
// exists for.
func TestJudgeCatchesBrokenRuns(t *testing.T) {
	tests := []struct {
		name   string
		break_ func(*Truth, *Observed)
		want   string // where/kind
	}{
		{"settle loses a record", func(_ *Truth, o *Observed) { o.Settled = o.Settled[1:] }, "settled/lost"},
		{"settle duplicates a record", func(_ *Truth, o *Observed) {
			d := o.Settled[0]
			d.Offset = 99
			o.Settled = append(o.Settled, d)
		}, "settled/duplicated"},
		{"settle delivers an aborted record", func(tr *Truth, o *Observed) {
			in := tr.Inputs[3]
			o.Settled = append(o.Settled, Output{Partition: in.Partition, Offset: 98, Src: in.Coord(), G: in.G, Key: in.Key, N: 9})
		}, "settled/aborted-delivered"},
		{"settle reorders a causal pair", func(_ *Truth, o *Observed) {
			// two outputs of one partition swap places (offsets stay)
			var idx []int
			for i, s := range o.Settled {
				if s.Partition == o.Settled[0].Partition {
					idx = append(idx, i)
				}
			}
			i, j := idx[0], idx[1]
			o.Settled[i].Src, o.Settled[j].Src = o.Settled[j].Src, o.Settled[i].Src
			o.Settled[i].G, o.Settled[j].G = o.Settled[j].G, o.Settled[i].G
			o.Settled[i].Key, o.Settled[j].Key = o.Settled[j].Key, o.Settled[i].Key
			o.Settled[i].N, o.Settled[j].N = o.Settled[j].N, o.Settled[i].N
		}, "settled/order"},
		{"settle's state is off by one", func(_ *Truth, o *Observed) { o.Settled[len(o.Settled)-1].N++ }, "settled/state"},
		{"audit loses a record", func(_ *Truth, o *Observed) { o.Audited = o.Audited[:len(o.Audited)-1] }, "audited/lost"},
		{"audit duplicates a record", func(_ *Truth, o *Observed) { o.Audited = append(o.Audited, o.Audited[0]) }, "audited/duplicated"},
		{"the stream reorders one partition", func(_ *Truth, o *Observed) {
			for i := range o.Stream {
				for j := i + 1; j < len(o.Stream); j++ {
					if o.Audited[i].Partition == o.Audited[j].Partition {
						o.Stream[i].From, o.Stream[j].From = o.Stream[j].From, o.Stream[i].From
						o.Stream[i].Src, o.Stream[j].Src = o.Stream[j].Src, o.Stream[i].Src
						o.Stream[i].G, o.Stream[j].G = o.Stream[j].G, o.Stream[i].G
						o.Stream[i].N, o.Stream[j].N = o.Stream[j].N, o.Stream[i].N
						o.Stream[i].Key, o.Stream[j].Key = o.Stream[j].Key, o.Stream[i].Key
						return
					}
				}
			}
		}, "stream/order"},
		{"the stream holds a record audit never committed", func(_ *Truth, o *Observed) {
			x := o.Stream[0]
			x.From = "audited/0@77"
			o.Stream = append(o.Stream, x)
		}, "stream/aborted-delivered"},
		{"the stream changes a payload", func(_ *Truth, o *Observed) { o.Stream[0].N += 5 }, "stream/state"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, o := world()
			tt.break_(tr, o)
			v := Judge(tr, o)
			var got []string
			for _, x := range v.Violations {
				got = append(got, x.Where+"/"+x.Kind)
			}
			if !slices.Contains(got, tt.want) {
				t.Fatalf("want a %s violation, got %v", tt.want, v.Violations)
			}
			if v.OK() || v.Summary() == "" {
				t.Fatal("a broken run judged OK")
			}
		})
	}
}

func ExampleVerdict_Summary() {
	tr, o := world()
	o.Settled = o.Settled[1:]
	fmt.Println(Judge(tr, o).Summary())
	// Output: inputs=6 committed=5 aborted=1 settled=4 audited=5 streamed=5 violations=2 (audited/aborted-delivered=1 settled/lost=1)
}
