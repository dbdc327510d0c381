//go:build parsley_sabotage

package sim

import (
	"context"
	"testing"

	"github.com/parsley-go/parsley/protocol"
)

// These self-tests need the protocol's own switches, which exist only in
// parsley_sabotage builds: go test -tags parsley_sabotage ./protocol ./sim.

// protocolSabotaged is a NewProtocol building the real node with the
// switches in s set.
func protocolSabotaged(s protocol.Sabotage) NewProtocol {
	return func(ctx context.Context, cfg protocol.Config) (Protocol, error) {
		n, err := protocol.NewSabotaged(ctx, cfg, s)
		if err != nil {
			return nil, err
		}
		return n, nil
	}
}

// TestFailOpenCaught: a protocol that reads an undecodable stamp as absent
// delivers the corrupt record, and the kit flags it (FailOpen).
func TestFailOpenCaught(t *testing.T) {
	n := seeds(t, 50)
	sc := CorruptStamp()
	open := 0
	for seed := uint64(1); seed <= uint64(n); seed++ {
		if r := RunScenario(context.Background(), sc, seed, Options{NewProtocol: protocolSabotaged(protocol.SabotageUndecodableAsAbsent)}); r.Has(FailOpen) {
			open++
		}
	}
	t.Logf("UndecodableAsAbsent caught %d/%d seeds", open, n)
	if open*100 < 90*n {
		t.Errorf("UndecodableAsAbsent caught on %d of %d seeds, floor 90%%", open, n)
	}
}

// TestProtocolSabotage: each of the protocol's own switches must be caught
// on a floor of its target scenarios' seeds; rows with a violation kind
// count only seeds that check caught. UndecodableAsAbsent is
// TestFailOpenCaught's.
func TestProtocolSabotage(t *testing.T) {
	sw := func(s protocol.Sabotage) Options { return Options{NewProtocol: protocolSabotaged(s)} }
	runSelfTests(t, []selfTest{
		{"IgnoreClaims", sw(protocol.SabotageIgnoreClaims), []string{"fanout", "request-reply", "multi-partition", "own-outputs", "soak"}, 80, 0},
		{"DropHeldRecord", sw(protocol.SabotageDropHeldRecord), []string{"fanout", "multi-partition", "truncation", "soak"}, 50, 0},
		{"SkipReceiveFold", sw(protocol.SabotageSkipReceiveFold), []string{"linear", "diamond", "truncation"}, 80, 0},
		{"ForgetDeliveredSeqs", sw(protocol.SabotageForgetDeliveredSeqs), []string{"fanout", "request-reply", "multi-partition"}, 60, 0},
		{"SkipHeadFold", sw(protocol.SabotageSkipHeadFold), []string{"head-fold", "request-reply", "multi-partition", "own-outputs", "soak"}, 60, 0},
		{"SkipCarried", sw(protocol.SabotageSkipCarried), []string{"scope-shrink"}, 40, 0},
		{"AdmitReplays", sw(protocol.SabotageAdmitReplays), []string{"replays"}, 90, 0},
		// The watermark invariants see two switches directly.
		{"SkipHeadFold/invariant", sw(protocol.SabotageSkipHeadFold), []string{"head-fold", "multi-partition", "soak"}, 60, Invariant},
		{"ForgetDeliveredSeqs/invariant", sw(protocol.SabotageForgetDeliveredSeqs), []string{"fanout", "shared-senders", "multi-partition"}, 60, Invariant},
		{"SkipCarried/stamp-gap", sw(protocol.SabotageSkipCarried), []string{"scope-shrink", "shrink-ancestry"}, 30, StampGap},
		{"SkipReceiveFold/stamp-gap", sw(protocol.SabotageSkipReceiveFold), []string{"linear", "diamond", "truncation"}, 80, StampGap},
	})
}
