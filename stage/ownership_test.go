package stage

import (
	"testing"
)

// TestOwnershipContinuesOnlyUnbroken drives the ownership through the
// group's words and checks, after each, which holdings continue from the
// first sync (where a task opened then would run on) and which started
// over (where it is closed and restored).
func TestOwnershipContinuesOnlyUnbroken(t *testing.T) {
	p0 := map[string][]int32{"in": {0}}
	p01 := map[string][]int32{"in": {0, 1}}
	none := map[string][]int32{}
	type event func(o *ownership)
	sync := func(gen int32, m map[string][]int32) event { return func(o *ownership) { o.synced(gen, m) } }
	revoke := func(m map[string][]int32) event { return func(o *ownership) { o.onRevoked(nil, nil, m) } }
	lost := func(m map[string][]int32) event { return func(o *ownership) { o.onLost(nil, nil, m) } }
	assign := func(m map[string][]int32) event { return func(o *ownership) { o.onAssigned(m) } }
	ended := func(o *ownership) { o.ended() }
	for _, tc := range []struct {
		name   string
		events []event
		// whether in[0], held since the first sync, still holds the
		// epoch it began in; and whether it is held at all
		continues, held bool
	}{
		{"next generation keeps it", []event{sync(5, p01)}, true, true},
		{"a generation later still", []event{sync(5, p0), sync(6, p01)}, true, true},
		{"the same generation again", []event{sync(4, p01)}, true, true},
		{"revoked by a sync", []event{sync(5, none)}, false, false},
		{"revoked and given back by the next syncs", []event{sync(5, none), sync(6, p0)}, false, true},
		// A revoke franz-go swallowed (a second one between two ends of a
		// transaction) leaves no callback: the syncs alone tell.
		{"taken and given back with no callback between", []event{sync(5, p01), sync(6, none), sync(7, p0)}, false, true},
		// The member missed generation 5: it was out of the group, and
		// another member may have run in[0].
		{"a generation skipped", []event{sync(6, p0)}, false, true},
		{"a generation skipped after a swallowed loss", []event{sync(5, p0), sync(9, p0)}, false, true},
		{"lost, then given back in the next generation", []event{lost(p01), sync(5, p0)}, false, true},
		{"the session ended", []event{ended, sync(5, p0)}, false, true},
		{"a revoke with no sync (leaving)", []event{revoke(p0)}, false, false},
		{"revoked, assigned with no sync", []event{revoke(p0), assign(p0)}, false, true},
		{"assigned again changes nothing", []event{assign(p01)}, true, true},
		{"an unknown generation continues nothing", []event{sync(-1, p01)}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newOwnership()
			o.synced(4, p01)
			_, before := o.read()
			since := before[topicPartition{"in", 0}]
			v := o.currentVersion()
			for _, e := range tc.events {
				e(o)
			}
			if o.currentVersion() == v && len(tc.events) > 0 && !(tc.continues && tc.held) {
				t.Errorf("version did not move")
			}
			_, after := o.read()
			got, held := after[topicPartition{"in", 0}]
			if held != tc.held || (got == since) != (tc.continues && held) {
				t.Errorf("in[0] held %v since %d (was %d), want held %v continuing %v", held, got, since, tc.held, tc.continues)
			}
		})
	}
}
