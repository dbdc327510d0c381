package adaptertest

import (
	"fmt"
	"testing"

	"github.com/parsley-go/parsley/internal/rig/oracle"
)

// settled builds the oracle's deliveries of settlements given as
// key/kind, in the settlements topic's order.
func settled(ss ...string) []oracle.Delivery {
	ds := make([]oracle.Delivery, len(ss))
	for i, s := range ss {
		var k, kind string
		fmt.Sscanf(s, "%s %s", &k, &kind)
		rank := int64(0)
		if kind == "payment" {
			rank = 1
		}
		ds[i] = oracle.Delivery{Source: k + "/" + kind, At: fmt.Sprint(i), Lane: k, Rank: rank}
	}
	return ds
}

// TestJudgeCountsEachBreak: hand-made settlements of two pairs, each
// broken one way, give the counts Test fails on.
func TestJudgeCountsEachBreak(t *testing.T) {
	k0, k1 := string(key(0)), string(key(1))
	tests := []struct {
		name string
		ds   []oracle.Delivery
		want Result
	}{
		{"clean", settled(k0+" order", k1+" order", k0+" payment", k1+" payment"), Result{}},
		{"payment lost", settled(k0+" order", k1+" order", k0+" payment"), Result{Lost: 1}},
		{"pair lost", settled(k0+" order", k0+" payment"), Result{Lost: 1}},
		{"duplicated", settled(k0+" order", k0+" payment", k0+" payment", k1+" order", k1+" payment"), Result{Duplicated: 1}},
		{"unexpected", settled(k0+" order", k0+" payment", k1+" order", k1+" payment", "stray order"), Result{Unexpected: 1}},
		{"out of order", settled(k0+" payment", k0+" order", k1+" order", k1+" payment"), Result{OutOfOrder: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Result
			got.judge(oracle.ExactlyOnceInOrder(truth(2), tt.ds))
			if got != tt.want {
				t.Errorf("judge = %+v, want %+v", got, tt.want)
			}
		})
	}
}
