package hostsim

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Offset is a committed group offset and its metadata.
type Offset struct {
	At   int64
	Meta string
}

// Group is the coordinator of one consumer group under the classic
// protocol: a join round (PreparingRebalance) ends when every member
// rejoined, or after the rebalance timeout without the laggards; the
// generation then moves on and the leader's balancer plans it
// (CompletingRebalance) until every member synced (Stable). A static
// member that comes back under its instance ID replaces its old member
// and, while the group is stable, takes its assignment without a round.
type Group struct {
	c       *Cluster
	Name    string
	gen     int32
	state   groupState
	since   time.Time // when the state began
	members []*gmember
	// plans holds each generation's plan: member ID -> its assignment.
	plans     map[int32]map[string]map[string][]int32
	committed map[TP]Offset
	next      int
}

type groupState int

const (
	stable groupState = iota
	preparing
	completing
)

type gmember struct {
	id, instance string
	meta         []byte // its join's protocol metadata
	joined       bool   // in the open join round
	beat         time.Time
	client       *Member
	sync         []byte // its assignment of the generation, until it syncs
}

// NewGroup creates the cluster's consumer group.
func (c *Cluster) NewGroup(name string) *Group {
	c.group = &Group{c: c, Name: name, plans: make(map[int32]map[string]map[string][]int32), committed: make(map[TP]Offset)}
	return c.group
}

// Group returns the cluster's consumer group.
func (c *Cluster) Group() *Group { return c.group }

// Generation returns the group's generation.
func (g *Group) Generation() int32 { return g.gen }

// Committed returns the group's committed offset of tp.
func (g *Group) Committed(tp TP) (Offset, bool) {
	o, ok := g.committed[tp]
	return o, ok
}

// PendingOn reports whether an open transaction commits an offset of tp:
// a stable offset fetch waits for it (UNSTABLE_OFFSET_COMMIT).
func (g *Group) PendingOn(tp TP) bool {
	for _, p := range g.c.producers {
		if p.Open != nil {
			if _, ok := p.Open.Offsets[tp]; ok {
				return true
			}
		}
	}
	return false
}

// Plan returns what generation gen's plan gave member id.
func (g *Group) Plan(gen int32, id string) map[string][]int32 { return g.plans[gen][id] }

// Instances returns the instance IDs of the members, sorted.
func (g *Group) Instances() []string {
	var out []string
	for _, m := range g.members {
		out = append(out, m.instance)
	}
	slices.Sort(out)
	return out
}

func (g *Group) hasInstance(inst string) bool {
	return slices.ContainsFunc(g.members, func(m *gmember) bool { return m.instance == inst })
}

func (g *Group) member(id string) *gmember {
	for _, m := range g.members {
		if m.id == id {
			return m
		}
	}
	return nil
}

// rebalance opens a join round, unless one is open.
func (g *Group) rebalance(why string) {
	if g.state == preparing {
		return
	}
	g.c.s.Note("group: rebalance (%s)", why)
	g.state, g.since = preparing, g.c.s.now
	for _, m := range g.members {
		m.joined = false
		m.sync = nil
	}
}

// join takes member m's join: a new member gets an ID; a static member
// that comes back replaces its old member.
func (g *Group) join(cl *Member, meta []byte) {
	var m *gmember
	if cl.memberID != "" {
		m = g.member(cl.memberID)
	}
	if m == nil {
		for _, o := range g.members {
			if o.instance == cl.Instance {
				m = o // static membership: the instance comes back
			}
		}
		if m != nil {
			g.next++
			old := m.client
			oldID := m.id
			m.id = fmt.Sprintf("%s-%d", cl.Instance, g.next)
			if plan := g.plans[g.gen]; plan != nil {
				plan[m.id] = plan[oldID]
			}
			m.client = cl
			cl.memberID = m.id
			if old != nil && old != cl {
				old.fencedOut = true
			}
			if g.state == stable && slices.Equal(m.meta, meta) {
				// KIP-345: the old member's assignment, no round.
				cl.gen = g.gen
				m.beat = g.c.s.now
				m.sync = g.assignmentBytes(m.id)
				g.c.s.Note("group: %s replaces its member as %s in generation %d", cl.Instance, m.id, g.gen)
				return
			}
		}
	}
	if m == nil {
		g.next++
		m = &gmember{id: fmt.Sprintf("%s-%d", cl.Instance, g.next), instance: cl.Instance, client: cl}
		g.members = append(g.members, m)
		cl.memberID = m.id
	}
	m.meta, m.beat = meta, g.c.s.now
	if g.state != preparing {
		g.rebalance("join of " + m.id)
	}
	m.joined = true
	g.c.s.Note("group: %s joined", m.id)
	g.maybeComplete()
}

// maybeComplete ends the join round once every member joined.
func (g *Group) maybeComplete() {
	if g.state != preparing || slices.ContainsFunc(g.members, func(m *gmember) bool { return !m.joined }) {
		return
	}
	g.complete()
}

// complete moves to the next generation and plans it with the leader's
// balancer.
func (g *Group) complete() {
	g.gen++
	g.state, g.since = completing, g.c.s.now
	if len(g.members) == 0 {
		g.state = stable
		return
	}
	leader := g.members[0].client
	var ms []kmsg.JoinGroupResponseMember
	for _, m := range g.members {
		jm := kmsg.NewJoinGroupResponseMember()
		jm.MemberID = m.id
		inst := m.instance
		jm.InstanceID = &inst
		jm.ProtocolMetadata = m.meta
		ms = append(ms, jm)
	}
	b, topics, err := leader.Balancer.MemberBalancer(ms)
	if err != nil {
		panic(fmt.Sprintf("hostsim: balancer: %v", err))
	}
	counts := make(map[string]int32)
	for t := range topics {
		if n := g.c.Partitions(t); n > 0 {
			counts[t] = n
		}
	}
	var into kgo.IntoSyncAssignment
	if be, ok := b.(kgo.GroupMemberBalancerOrError); ok {
		if into, err = be.BalanceOrError(counts); err != nil {
			panic(fmt.Sprintf("hostsim: balance: %v", err))
		}
	} else {
		into = b.Balance(counts)
	}
	plan := make(map[string]map[string][]int32)
	for _, a := range into.IntoSyncAssignment() {
		parsed, err := kgo.ParseConsumerSyncAssignment(a.MemberAssignment)
		if err != nil {
			panic(fmt.Sprintf("hostsim: plan: %v", err))
		}
		plan[a.MemberID] = parsed
		if m := g.member(a.MemberID); m != nil {
			m.sync = a.MemberAssignment
		}
	}
	g.plans[g.gen] = plan
	for _, m := range g.members {
		m.client.gen = g.gen
	}
	g.c.s.Note("group: generation %d planned: %v", g.gen, planString(plan))
}

func planString(plan map[string]map[string][]int32) string {
	s := ""
	for _, id := range slices.Sorted(maps.Keys(plan)) {
		s += fmt.Sprintf(" %s=%v", id, plan[id])
	}
	return s
}

// assignmentBytes re-encodes member id's current assignment (a static
// member taking its old one over).
func (g *Group) assignmentBytes(id string) []byte {
	var a kmsg.ConsumerMemberAssignment
	a.Version = 3
	as := g.plans[g.gen][id]
	for _, t := range slices.Sorted(maps.Keys(as)) {
		at := kmsg.NewConsumerMemberAssignmentTopic()
		at.Topic = t
		at.Partitions = as[t]
		a.Topics = append(a.Topics, at)
	}
	// The standby user data of the plan is not kept: a static member
	// coming back runs no standbys until the next round.
	return a.AppendTo(nil)
}

// synced records that m took its assignment; the group is stable once
// every member did.
func (g *Group) synced(m *gmember) {
	m.sync = nil
	if g.state == completing && !slices.ContainsFunc(g.members, func(m *gmember) bool { return m.sync != nil }) {
		g.state, g.since = stable, g.c.s.now
		g.c.s.Note("group: generation %d stable", g.gen)
	}
}

// remove takes a member out of the group and rebalances.
func (g *Group) remove(m *gmember, why string) {
	g.members = slices.DeleteFunc(g.members, func(o *gmember) bool { return o == m })
	// Its client hears of it at its next heartbeat (Member.Step).
	g.c.s.Note("group: %s removed (%s)", m.id, why)
	if g.state == preparing {
		g.maybeComplete()
		return
	}
	g.rebalance("removal of " + m.id)
	g.maybeComplete()
}

// LeaveInstance removes the static member of instance inst (an admin
// LeaveGroup).
func (g *Group) LeaveInstance(inst string) bool {
	for _, m := range g.members {
		if m.instance == inst {
			g.remove(m, "left")
			return true
		}
	}
	return false
}

// tick expires members whose session timed out and ends a join round
// that waited out the rebalance timeout.
func (g *Group) tick() {
	now := g.c.s.now
	for _, m := range slices.Clone(g.members) {
		if now.Sub(m.beat) >= g.c.SessionTimeout {
			g.remove(m, "session timed out")
		}
	}
	if g.state == preparing && now.Sub(g.since) >= g.c.RebalanceTimeout {
		for _, m := range slices.Clone(g.members) {
			if !m.joined {
				g.remove(m, "did not rejoin in time")
			}
		}
		g.maybeComplete()
	}
}
