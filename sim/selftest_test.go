package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/parsley-go/parsley/headers"
)

// catch runs opts over the named scenarios and returns, per scenario and in
// total, how many seeds the kit flagged (with a violation of kind want,
// when want is set).
func catch(t *testing.T, opts Options, want ViolationKind, names []string, n int) (caught, total int, per string) {
	var b strings.Builder
	for _, name := range names {
		sc := scenario(t, name)
		c := 0
		for seed := uint64(1); seed <= uint64(n); seed++ {
			if r := RunScenario(context.Background(), sc, seed, opts); r.Failed() && (want == 0 || r.Has(want)) {
				c++
			}
		}
		fmt.Fprintf(&b, " %s %d/%d", name, c, n)
		caught += c
		total += n
	}
	return caught, total, b.String()
}

type selfTest struct {
	name    string
	opts    Options
	targets []string // scenarios built to expose the defect
	pct     int      // floor: percent of target seeds caught
	// want, when set, is the check that must catch it: a seed counts only
	// with a violation of this kind.
	want ViolationKind
}

func runSelfTests(t *testing.T, cases []selfTest) {
	n := seeds(t, 50)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			caught, total, per := catch(t, c.opts, c.want, c.targets, n)
			t.Logf("caught %d/%d seeds (floor %d%%):%s", caught, total, c.pct, per)
			if caught*100 < c.pct*total {
				t.Errorf("%s caught on %d of %d seeds, below the floor of %d%%: the kit no longer catches it", c.name, caught, total, c.pct)
			}
		})
	}
}

// TestOracleSelfTest is V8: an eager protocol that ignores every claim
// must be flagged. If this fails, every green result is meaningless.
func TestOracleSelfTest(t *testing.T) {
	runSelfTests(t, []selfTest{
		{"eager", Options{NewProtocol: EagerProtocol}, []string{"fanout", "request-reply", "multi-partition", "ticks", "soak", "linear", "triangle"}, 70, 0},
	})
}

// TestHostContractSelfTest is V9: each HostFault shirks one host duty and
// must be caught, on the scenarios built to expose it.
func TestHostContractSelfTest(t *testing.T) {
	runSelfTests(t, []selfTest{
		{BreakAtomicity.String(), Options{Fault: BreakAtomicity}, []string{"crash-chain", "fanout", "soak"}, 50, 0},
		{WithholdPositionAdvance.String(), Options{Fault: WithholdPositionAdvance}, []string{"trailing-marker", "filter"}, 25, 0},
		{FeedOutOfOrder.String(), Options{Fault: FeedOutOfOrder}, []string{"linear", "fanout", "soak"}, 90, 0},
		{SkipOwnOutputSeed.String(), Options{Fault: SkipOwnOutputSeed}, []string{"trailing-marker", "own-outputs"}, 25, 0},
		{IgnoreLogStart.String(), Options{Fault: IgnoreLogStart}, []string{"truncation", "soak"}, 25, 0},
		{AdvanceAhead.String(), Options{Fault: AdvanceAhead}, []string{"filter", "trailing-marker", "open-txn"}, 90, Invariant},
	})
	// Every fault has a row above.
	if got := len(HostFaults()); got != 6 {
		t.Errorf("%d host faults, 6 self-tested", got)
	}
}

// TestSabotage: each deliberate protocol defect must be caught on a
// measured share of its target scenarios' seeds.
func TestSabotage(t *testing.T) {
	runSelfTests(t, []selfTest{
		{DropHeldRecord.String(), Options{NewProtocol: Sabotaged(DropHeldRecord)}, []string{"fanout", "multi-partition", "soak"}, 80, 0},
		{StampReadAsAbsent.String(), Options{NewProtocol: Sabotaged(StampReadAsAbsent)}, []string{"fanout", "request-reply", "soak"}, 80, 0},
		{NoSequenceClaims.String(), Options{NewProtocol: Sabotaged(NoSequenceClaims)}, []string{"fanout", "request-reply", "multi-partition", "own-outputs"}, 80, 0},
		{SkipTruncation.String(), Options{NewProtocol: Sabotaged(SkipTruncation)}, []string{"former-sink"}, 20, 0},
		{FrontierOnlyStamp.String(), Options{NewProtocol: Sabotaged(FrontierOnlyStamp)}, []string{"linear", "diamond", "trailing-marker", "own-outputs", "scope-shrink"}, 30, 0},
		{ResumeAhead.String(), Options{NewProtocol: Sabotaged(ResumeAhead)}, []string{"scope-regrow", "regrow-seq", "crash-chain"}, 80, LostOnResume},
	})
}

// TestNewChecksSelfTest: the checks issue 13 added each catch a broken
// subject on their own, counted only when that check fires: the stamp
// check at send time, the watermark invariants, and the resume bound.
func TestNewChecksSelfTest(t *testing.T) {
	runSelfTests(t, []selfTest{
		{"stamp-gap/" + FrontierOnlyStamp.String(), Options{NewProtocol: Sabotaged(FrontierOnlyStamp)}, []string{"linear", "diamond", "shrink-ancestry", "own-outputs"}, 80, StampGap},
		{"stamp-gap/" + NoSequenceClaims.String(), Options{NewProtocol: Sabotaged(NoSequenceClaims)}, []string{"fanout", "shared-senders", "multi-partition"}, 90, StampGap},
		{"invariant/" + AdvanceAhead.String(), Options{Fault: AdvanceAhead}, []string{"filter", "trailing-marker", "open-txn"}, 90, Invariant},
		{"lost-on-resume/" + ResumeAhead.String(), Options{NewProtocol: Sabotaged(ResumeAhead)}, []string{"scope-regrow", "regrow-seq", "crash-chain"}, 80, LostOnResume},
	})
}

// TestFailClosed is V11 in the simulator: a record whose stamp does not
// decode is refused with headers.ErrUndecodable and never delivered. That a
// protocol reading it as absent is flagged is TestFailOpenCaught's, in
// parsley_sabotage builds.
func TestFailClosed(t *testing.T) {
	n := seeds(t, 50)
	sc := CorruptStamp()
	for seed := uint64(1); seed <= uint64(n); seed++ {
		r := RunScenario(context.Background(), sc, seed, Options{})
		if !errors.Is(r.Err, headers.ErrUndecodable) || r.Has(FailOpen) {
			t.Errorf("seed %d: want a refusal wrapping ErrUndecodable and no delivery, got err %v, violations %v\n%s", seed, r.Err, r.Violations, replay(sc.Name, seed))
		}
	}
}
