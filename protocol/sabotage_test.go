//go:build parsley_sabotage

package protocol

import (
	"testing"

	"github.com/parsley-go/parsley/headers"
)

// TestSabotageSwitchesBreakTheirRule: each switch changes exactly the
// behaviour it names, in a scenario where the correct node behaves
// otherwise, so a harness that misses a switch is the harness's fault.
func TestSabotageSwitchesBreakTheirRule(t *testing.T) {
	S := chn(31, 0)
	tests := []struct {
		sw Sabotage
		// run returns true when the node behaved correctly.
		run func(t *testing.T, e *env) bool
	}{
		{SabotageIgnoreClaims, func(t *testing.T, e *env) bool {
			n := e.node()
			return len(feed(t, n, rec(t, b0, 0, st{offs: []headers.OffsetEntry{off(a0, 0)}}))) == 0
		}},
		{SabotageDropHeldRecord, func(t *testing.T, e *env) bool {
			n := e.node()
			feed(t, n, rec(t, b0, 0, st{offs: []headers.OffsetEntry{off(a0, 0)}}))
			feed(t, n, plain(b0, 1))
			flush(t, n)
			return e.node().Counters().Held == 2
		}},
		{SabotageSkipReceiveFold, func(t *testing.T, e *env) bool {
			n := e.node()
			feed(t, n, rec(t, a0, 0, st{offs: []headers.OffsetEntry{off(x0, 5)}}))
			_, ok := prepare(t, n, S).Clock.Offset(x0)
			return ok
		}},
		{SabotageUndecodableAsAbsent, func(t *testing.T, e *env) bool {
			n := e.node()
			bad := plain(a0, 0)
			bad.Headers = []headers.Header{{Key: headers.HeaderVC, Value: []byte{9}}}
			_, err := n.OnRecord(bad)
			return err != nil
		}},
		{SabotageForgetDeliveredSeqs, func(t *testing.T, e *env) bool {
			n := e.node()
			s := headers.SenderID{4}
			feed(t, n, rec(t, a0, 0, st{sender: &s, seq: 3}))
			flush(t, n)
			m := e.node()
			return len(feed(t, m, rec(t, b0, 0, st{seqs: []headers.SeqEntry{sq(a0, s, 3)}}))) == 1
		}},
		{SabotageSkipHeadFold, func(t *testing.T, e *env) bool {
			n := e.node()
			feed(t, n, rec(t, a0, 10, st{offs: []headers.OffsetEntry{off(b0, 5)}}))
			feed(t, n, rec(t, a0, 15, st{offs: []headers.OffsetEntry{off(b0, 8)}}))
			feed(t, n, rec(t, c0, 0, st{offs: []headers.OffsetEntry{off(a0, 13)}}))
			return len(feed(t, n, plain(b0, 5))) == 3
		}},
		{SabotageAdmitReplays, func(t *testing.T, e *env) bool {
			n := e.node()
			feed(t, n, plain(a0, 0))
			flush(t, n)
			// Admitted, the replay reaches the gate again; the node either
			// delivers it twice or fails closed on the frontier moving back.
			ds, err := e.node().OnRecord(plain(a0, 0))
			return err == nil && len(ds) == 0
		}},
		{SabotageSkipCarried, func(t *testing.T, e *env) bool {
			n := e.node()
			feed(t, n, plain(b0, 6))
			flush(t, n)
			e.cfg.Inputs = []headers.Channel{a0, c0}
			_, ok := prepare(t, e.node(), S).Clock.Offset(b0)
			return ok
		}},
	}
	for _, tt := range tests {
		t.Run(tt.sw.String(), func(t *testing.T) {
			e := newEnv(t, []headers.Channel{a0, b0, c0}, []headers.TopicID{S.Topic})
			if !tt.run(t, e) {
				t.Fatal("the correct node misbehaved")
			}
			e = newEnv(t, []headers.Channel{a0, b0, c0}, []headers.TopicID{S.Topic})
			e.sab = tt.sw
			if tt.run(t, e) {
				t.Fatalf("switch %v changed nothing", tt.sw)
			}
		})
	}
	if got := (SabotageIgnoreClaims | SabotageSkipCarried).String(); got != "IgnoreClaims|SkipCarried" {
		t.Fatalf("String = %q", got)
	}
}

// TestOracleCatchesSabotage: the seeded worlds' oracle is not vacuous:
// each switch it can see from one node is flagged on a share of the seeds.
func TestOracleCatchesSabotage(t *testing.T) {
	seeds := oracleSeeds()
	caught := map[Sabotage]int{}
	switches := []struct {
		sw      Sabotage
		restart bool
	}{
		{SabotageIgnoreClaims, false},
		{SabotageSkipHeadFold, false},
		{SabotageDropHeldRecord, true},
		{SabotageForgetDeliveredSeqs, true},
	}
	for seed := range uint64(seeds) {
		w := genWorld(seed)
		for _, s := range switches {
			if w.judge(t, s.sw, s.restart) != "" {
				caught[s.sw]++
			}
		}
	}
	for _, s := range switches {
		t.Logf("%v caught on %d of %d seeds", s.sw, caught[s.sw], seeds)
		if caught[s.sw] < seeds/5 {
			t.Errorf("oracle caught %v on only %d of %d seeds", s.sw, caught[s.sw], seeds)
		}
	}
}
