package stage

import (
	"context"
	"testing"
)

// TestOwnershipContinuesOnlyUnbroken drives the ownership through the
// group's words and checks, after each, whether in[0], held since the
// first sync (where a task opened then runs on), still holds the epoch it
// began in, or started over (where that task is closed and restored).
func TestOwnershipContinuesOnlyUnbroken(t *testing.T) {
	p0 := map[string][]int32{"in": {0}}
	p01 := map[string][]int32{"in": {0, 1}}
	none := map[string][]int32{}
	type event func(o *ownership)
	sync := func(member string, m map[string][]int32) event { return func(o *ownership) { o.synced(member, m) } }
	revoke := func(m map[string][]int32) event {
		return func(o *ownership) { o.onRevoked(context.Background(), nil, m) }
	}
	lost := func(m map[string][]int32) event { return func(o *ownership) { o.onLost(context.Background(), nil, m) } }
	assign := func(m map[string][]int32) event { return func(o *ownership) { o.onAssigned(m) } }
	ended := func(o *ownership) { o.ended() }
	for _, tc := range []struct {
		name      string
		events    []event
		continues bool // in[0] keeps the epoch it began in
		held      bool // in[0] is held at all
	}{
		{"the next sync keeps it", []event{sync("m1", p01)}, true, true},
		{"syncs later still", []event{sync("m1", p0), sync("m1", p01)}, true, true},
		// A sync the member missed (REBALANCE_IN_PROGRESS) while it
		// stayed in the group: what it held was given to nobody.
		{"a missed sync, same member", []event{sync("m1", p01), sync("m1", p0)}, true, true},
		{"revoked by a sync", []event{sync("m1", none)}, false, false},
		{"revoked and given back by the next syncs", []event{sync("m1", none), sync("m1", p0)}, false, true},
		// A revoke franz-go swallowed (a second one between two ends of a
		// transaction) leaves no callback: the syncs alone tell.
		{"taken and given back with no callback between", []event{sync("m1", p01), sync("m1", none), sync("m1", p0)}, false, true},
		// Removed from the group and back under a new ID: another member
		// may have run in[0] meanwhile, whether or not a loss was heard.
		{"back under a new member ID", []event{sync("m2", p0)}, false, true},
		{"a swallowed loss, then back", []event{sync("m1", p0), sync("m3", p0)}, false, true},
		{"lost, then given back under the same ID", []event{lost(p01), sync("m1", p0)}, false, true},
		{"the session ended", []event{ended, sync("m1", p0)}, false, true},
		{"a revoke with no sync (leaving)", []event{revoke(p0)}, false, false},
		{"revoked, assigned with no sync", []event{revoke(p0), assign(p0)}, false, true},
		{"assigned again changes nothing", []event{assign(p01)}, true, true},
		{"an unknown member continues nothing", []event{sync("", p01)}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newOwnership()
			o.synced("m1", p01)
			_, before := o.read()
			since := before[topicPartition{"in", 0}]
			v := o.currentVersion()
			for _, e := range tc.events {
				e(o)
			}
			if o.currentVersion() == v && !(tc.continues && tc.held) {
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
