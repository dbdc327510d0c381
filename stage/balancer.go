package stage

// The group balancer: co-partitioned, sticky and cooperative.

import (
	"cmp"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// coPartitioner is the group balancer of a stage application. The unit it
// assigns is a partition number: partition p of every topic the group
// consumes goes to one member, or to none, so a task (stage, p) sees
// partition p of each of its sources and no two members ever hold pieces
// of one task. A member gets the topics at p it subscribes to; during a
// rolling upgrade that changes a stage's sources, a topic only the other
// version reads stays unassigned at the partitions the old version holds.
//
// It is sticky: a partition number stays with its owner while the owner's
// share allows, so a member joining moves only its share to it. It is
// cooperative (KIP-429): a partition number changes owner in two
// rebalances — the first takes it from every member that holds any of its
// partitions, and gives it to no one; those members revoke (their open
// step aborts, or commits first under the exactly-once rules) and rejoin;
// the second gives it to the new owner. Tasks at other partition numbers
// keep processing throughout.
//
// Standby placement rides along (planStandbys, below): a member's join
// reports the standby copies it keeps, the plan prefers a warm member for
// a partition number that lost its owner, and each member's assignment
// carries its standby partition numbers (standbywire.go). host is this
// member's side of that (standby.go), nil in tests of the plan alone.
type coPartitioner struct {
	host *standbyHost
	// synced takes in each sync's assignment (ownership.synced); nil in
	// tests of the plan alone.
	synced func(assigned map[string][]int32)
}

// The eager predecessor was "parsley-copartitioned". A group cannot mix
// eager and cooperative members of one protocol name, so the cooperative
// balancer has its own.
func (coPartitioner) ProtocolName() string { return "parsley-copartitioned-coop" }
func (coPartitioner) IsCooperative() bool  { return true }

func (c coPartitioner) JoinGroupMetadata(topics []string, owned map[string][]int32, generation int32) []byte {
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = topics
	meta.Generation = generation
	meta.UserData = c.host.joinUserData()
	for _, t := range slices.Sorted(maps.Keys(owned)) {
		o := kmsg.NewConsumerMemberMetadataOwnedPartition()
		o.Topic = t
		o.Partitions = slices.Sorted(slices.Values(owned[t]))
		meta.OwnedPartitions = append(meta.OwnedPartitions, o)
	}
	return meta.AppendTo(nil)
}

// ParseSyncAssignment reads this member's assignment from a sync. franz-go
// calls it for every sync, whatever its transaction session passes on to
// the revoke callback, so the ownership learns every generation here.
func (c coPartitioner) ParseSyncAssignment(b []byte) (map[string][]int32, error) {
	assigned, err := c.host.parseAssignment(b)
	if err == nil && c.synced != nil {
		c.synced(assigned)
	}
	return assigned, err
}

func (c coPartitioner) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	b, err := kgo.NewConsumerBalancer(c, members)
	if err != nil {
		return nil, nil, err
	}
	return b, b.MemberTopics(), nil
}

func (coPartitioner) Balance(b *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	var views []memberView
	var refs []*kmsg.JoinGroupResponseMember
	b.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		v := memberView{id: m.MemberID, topics: make(map[string]bool, len(meta.Topics)), owned: make(map[string][]int32), generation: meta.Generation}
		if m.InstanceID != nil {
			v.instance = *m.InstanceID
		}
		for _, t := range meta.Topics {
			v.topics[t] = true
		}
		for _, o := range meta.OwnedPartitions {
			v.owned[o.Topic] = append(v.owned[o.Topic], o.Partitions...)
		}
		v.standbys, v.warm = readJoinUserData(meta.UserData)
		views = append(views, v)
		refs = append(refs, m)
	})
	assigned, owner, claimants := planOwners(views, topics)
	return syncAssignments(refs, assigned, planStandbys(views, owner, claimants))
}

// rankMembers returns the indexes of members ranked by instance ID, then
// member ID, so every leader computes the same plan from the same join.
func rankMembers(members []memberView) []int {
	rank := make([]int, len(members))
	for i := range rank {
		rank[i] = i
	}
	slices.SortFunc(rank, func(x, y int) int {
		return cmp.Or(cmp.Compare(members[x].instance, members[y].instance), cmp.Compare(members[x].id, members[y].id))
	})
	return rank
}

// memberView is what the balancer reads of one member's join.
type memberView struct {
	id, instance string
	topics       map[string]bool    // the topics it subscribes to
	owned        map[string][]int32 // what it holds now
	generation   int32              // the generation of that holding
	standbys     int                // the Config.Standbys it runs with (standby.go)
	warm         map[int32]bool     // the partition numbers it keeps standby copies of
}

// planOwners assigns partition numbers to members and returns, per member
// in the order given, the topic partitions it gets this round. Members are
// ranked by instance ID, then member ID, so every leader computes the same
// plan from the same join. It also returns, per partition number, its
// planned owner (an index into members) and the members holding any of
// its partitions now, for standby placement (planStandbys).
func planOwners(members []memberView, topics map[string]int32) (out []map[string][]int32, owner []int, claimants [][]int) {
	out = make([]map[string][]int32, len(members))
	for i := range out {
		out[i] = make(map[string][]int32)
	}
	n := len(members)
	if n == 0 {
		return out, nil, nil
	}
	rank := rankMembers(members)
	var parts int32
	for _, c := range topics {
		parts = max(parts, c)
	}
	// Who holds partition p now: every member holding any topic at p, and
	// the one with the newest holding, which keeps p if its share allows.
	claimants = make([][]int, parts)
	current := make([]int, parts)
	for p := range current {
		current[p] = -1
	}
	for _, i := range rank {
		m := members[i]
		for t, ps := range m.owned {
			for _, p := range ps {
				if p < 0 || p >= parts || p >= topics[t] || slices.Contains(claimants[p], i) {
					continue
				}
				claimants[p] = append(claimants[p], i)
				if c := current[p]; c < 0 || m.generation > members[c].generation {
					current[p] = i
				}
			}
		}
	}
	// Shares: every member base numbers, extra of them one more.
	base, extra := int(parts)/n, int(parts)%n
	owner = make([]int, parts)
	count := make([]int, n)
	for p := range owner {
		owner[p] = -1
		if c := current[p]; c >= 0 && count[c] < base {
			owner[p] = c
			count[c]++
		}
	}
	for p := range owner {
		if c := current[p]; owner[p] < 0 && c >= 0 && count[c] == base && extra > 0 {
			owner[p] = c
			count[c]++
			extra--
		}
	}
	extra = ownWarm(members, rank, owner, count, base, extra) // standby placement, below
	for p := range owner {
		if owner[p] >= 0 {
			continue
		}
		best := -1
		for _, i := range rank {
			if count[i] < base || count[i] == base && extra > 0 {
				if best < 0 || count[i] < count[best] {
					best = i
				}
			}
		}
		if count[best] == base {
			extra--
		}
		owner[p] = best
		count[best]++
	}
	names := slices.Sorted(maps.Keys(topics))
	for p, o := range owner {
		// Taken from another member: nobody gets p until it has revoked.
		if slices.ContainsFunc(claimants[p], func(c int) bool { return c != o }) {
			continue
		}
		for _, t := range names {
			if int32(p) < topics[t] && members[o].topics[t] {
				out[o][t] = append(out[o][t], int32(p))
			}
		}
	}
	return out, owner, claimants
}

// Standby placement (Config.Standbys) rides on this balancer, which runs
// on the group leader: each member's join reports how many standbys it
// runs with and the partition numbers it keeps copies of (standbywire.go);
// the leader prefers a warm member when a partition number loses its owner
// (ownWarm), places the copies (planStandbys), and puts each member's
// standby partition numbers in the user data of its assignment, so every
// member learns its part from the same plan. A copy is never placed on the
// number's owner, nor on a member still holding any of its partitions (it
// is moving away from it); while the number moves, its owner-to-be may
// keep one (standbyAllowed).

// planStandbys places the standby copies of each partition number given
// its planned owner and current claimants (planOwners): as many copies as
// the most any member asks for, on members that ask for some, never on a
// claimant, and never on the owner once it is given the number. In the
// round where a number moves, its owner-to-be may keep (or start) a copy,
// which warms it up: it stays warm for the next round, which gives it the
// number, and the task restores only the tail.
//
// The copies of one owner's numbers go to different members first: when
// the owner is lost, each of its numbers then has a warm member of its
// own, and ownWarm can give every one to its copy within the shares. Then
// a member that already keeps a warm copy of the number keeps it while its
// load stays under an even share; otherwise the least loaded member gets
// it, ties going to the member that follows the owner most closely in the
// balancer's ranking. It returns, per member, its standby partition numbers
// in ascending order.
func planStandbys(members []memberView, owner []int, claimants [][]int) [][]int32 {
	out := make([][]int32, len(members))
	want := 0
	var willing []int
	for i, m := range members {
		want = max(want, m.standbys)
		if m.standbys > 0 {
			willing = append(willing, i)
		}
	}
	if want == 0 || len(owner) == 0 {
		return out
	}
	share := (len(owner)*want + len(willing) - 1) / len(willing)
	load := make([]int, len(members))
	// kin[i][o]: copies member i keeps of numbers member o owns.
	kin := make([][]int, len(members))
	for i := range kin {
		kin[i] = make([]int, len(members))
	}
	pos := make([]int, len(members)) // place in the ranking, of every member
	for i, x := range rankMembers(members) {
		pos[x] = i
	}
	for p, o := range owner {
		var cands []int
		for _, i := range willing {
			if standbyAllowed(i, o, claimants[p]) {
				cands = append(cands, i)
			}
		}
		sticky := func(i int) bool { return members[i].warm[int32(p)] && load[i] < share }
		after := func(i int) int { return (pos[i] - pos[o] + len(members)) % len(members) }
		slices.SortStableFunc(cands, func(x, y int) int {
			if sx, sy := sticky(x), sticky(y); sx != sy {
				if sx {
					return -1
				}
				return 1
			}
			return cmp.Or(cmp.Compare(load[x], load[y]), cmp.Compare(after(x), after(y)))
		})
		slices.SortStableFunc(cands, func(x, y int) int { return cmp.Compare(kin[x][o], kin[y][o]) })
		for _, i := range cands[:min(want, len(cands))] {
			out[i] = append(out[i], int32(p))
			load[i]++
			kin[i][o]++
		}
	}
	return out
}

// standbyAllowed reports whether member i may keep a copy of a number with
// planned owner o and claimants: not while it holds any of the number, and
// not once it owns it, which is when no other member holds any of it.
func standbyAllowed(i, o int, claimants []int) bool {
	if slices.Contains(claimants, i) {
		return false
	}
	moving := slices.ContainsFunc(claimants, func(c int) bool { return c != o })
	return i != o || moving
}

// ownWarm gives each partition number without an owner yet to a member
// that keeps a warm copy of it, when that member's share has room (count
// below base, or at base while extra shares are left), before the owner
// plan spreads the rest: the task then restores only the tail its copy has
// not applied. Any member with room keeps the plan feasible, because the
// shares left always add up to the numbers left. It returns the extra
// shares left.
func ownWarm(members []memberView, rank, owner, count []int, base, extra int) int {
	for p := range owner {
		if owner[p] >= 0 {
			continue
		}
		for _, i := range rank {
			if !members[i].warm[int32(p)] || count[i] > base || count[i] == base && extra == 0 {
				continue
			}
			if count[i] == base {
				extra--
			}
			owner[p] = i
			count[i]++
			break
		}
	}
	return extra
}
