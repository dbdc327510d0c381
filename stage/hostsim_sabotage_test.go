//go:build parsley_sabotage

package stage

import (
	"fmt"
	"os"
	"testing"
)

// TestHostSimDefectsSabotaged runs each fixed schedule with its fix
// switched off: each must find the break it was written for.
func TestHostSimDefectsSabotaged(t *testing.T) {
	switches := map[string]sabotageSwitch{
		"second revoke in one step":           sabRevokesFromCallbacks,
		"revoked and back during a reconcile": sabAbsorbLateChanges,
		"loss swallowed across generations":   sabIgnoreMembership,
		"lost and back between polls":         sabFeedAcrossMoves,
		"commit after a swallowed loss":       sabCommitUnheld,
	}
	for _, tc := range simDefects {
		t.Run(tc.name, func(t *testing.T) {
			sab, ok := switches[tc.name]
			if !ok {
				t.Fatalf("no sabotage switch for %q", tc.name)
			}
			h := newDefectHost(t, tc.seed)
			h.sabotage = sabotageSet(sab)
			fs := tc.run(h)
			if len(fs) == 0 {
				t.Fatalf("no finding with the fix switched off (%s)", h.summary())
			}
			t.Logf("found: %s", fs[0])
		})
	}
}

// TestHostSimSeesSabotage switches off, one at a time, each rule the host
// keeps exactly-once with across rebalances (sabotage.go), and checks that
// the host simulator's CI seeds find the break: the judge is only as good
// as the faults it notices.
func TestHostSimSeesSabotage(t *testing.T) {
	for _, tc := range []struct {
		name string
		sab  sabotageSwitch
	}{
		{"revokes from callbacks", sabRevokesFromCallbacks},
		{"late changes absorbed", sabAbsorbLateChanges},
		// sabIgnoreMembership needs a loss swallowed while a reconcile
		// opens the tasks of the loss before: the fixed schedule above
		// (lossSwallowedAcrossGenerations) judges it.
	} {
		t.Run(tc.name, func(t *testing.T) {
			// PARSLEY_HOSTSIM_CATCHRATE runs every seed and reports how
			// many found the break, for docs/verification.md.
			rate := os.Getenv("PARSLEY_HOSTSIM_CATCHRATE") != ""
			seeds, found := simSeeds(t), 0
			for seed := range uint64(seeds) {
				h := newSimHost(t, seed+1, simOptionsFor(seed+1))
				h.sabotage = sabotageSet(tc.sab)
				if fs := h.run(); len(fs) > 0 {
					if found == 0 {
						t.Logf("seed %d of %d found it: %s", seed+1, seeds, fs[0])
					}
					found++
					if !rate {
						return
					}
				}
			}
			if found == 0 {
				t.Errorf("%d seeds did not notice: %s", seeds, fmt.Sprint(tc.name))
			}
			t.Logf("%d of %d seeds found it", found, seeds)
		})
	}
}
