package netsoak

import (
	"fmt"
	"sort"
)

// Input is one record the producer wrote, as the producer knows it: its
// ground-truth sequence G (the order in which records were stamped; the
// producer awaits each acknowledgement and folds it before stamping the
// next, so G order is happened-before order among records), its key and
// coordinate, and whether its transaction committed.
type Input struct {
	G         int64
	Key       string
	Topic     string
	Partition int32
	Offset    int64
	Committed bool
}

// Coord names the input as the stages' outputs cite it.
func (in Input) Coord() string { return coord(in.Topic, in.Partition, in.Offset) }

func coord(topic string, p int32, o int64) string { return fmt.Sprintf("%s/%d@%d", topic, p, o) }

// Output is one record a stage wrote (or the bridge stored), as the oracle
// reads it back: where it sits (partition and offset, or stream sequence)
// and what it says about the input it was derived from.
type Output struct {
	Partition int32
	Offset    int64 // the output's own offset, or the stream sequence
	Src       string
	G         int64
	Key       string
	N         int64 // settle's count for Key after this input
	From      string
}

// Value is the payload every stage writes: the source input's coordinate,
// ground-truth sequence and key, settle's count for the key, and the
// coordinate of the record the writing stage consumed (for audit and the
// bridge, the upstream output).
type Value struct {
	Src  string `json:"src"`
	G    int64  `json:"g"`
	Key  string `json:"k"`
	N    int64  `json:"n"`
	From string `json:"from,omitempty"`
}

// Truth is the producer's ground truth.
type Truth struct {
	Inputs []Input
}

// committed returns the committed inputs by coordinate, and per key the
// committed inputs in G order.
func (t *Truth) committed() (map[string]Input, map[string][]Input) {
	byCoord := make(map[string]Input)
	byKey := make(map[string][]Input)
	for _, in := range t.Inputs {
		if !in.Committed {
			continue
		}
		byCoord[in.Coord()] = in
		byKey[in.Key] = append(byKey[in.Key], in)
	}
	for _, ins := range byKey {
		sort.Slice(ins, func(i, j int) bool { return ins[i].G < ins[j].G })
	}
	return byCoord, byKey
}
