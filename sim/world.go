package sim

import (
	"context"
	"fmt"
	"hash"
	"hash/fnv"
	"math/rand/v2"
	"slices"

	"github.com/parsley-go/parsley/headers"
	"github.com/parsley-go/parsley/protocol"
)

// TopicSpec declares a topic.
type TopicSpec struct {
	Name       string
	Partitions int
}

// Spec is one world: its topics, stage tasks, edge clients and budgets.
type Spec struct {
	Topics    []TopicSpec
	Nodes     []NodeSpec
	Producers []ProducerSpec
	// Crashes is the crash budget: the scheduler injects up to this many,
	// idle or mid-step. The last one is reserved for a node that holds
	// records, and holding nodes draw crashes at double weight.
	Crashes int
	// Retention is the number of retention advances (log-start moves,
	// bounded by subscribers' positions) the scheduler may draw.
	Retention int
	// Truncations is the number of truncation sweeps the scheduler may draw.
	Truncations int
	// Steps is the step budget: a world that has not drained by then fails
	// as wedged. Zero means 20000.
	Steps int
	// Recreate names topics the scheduler deletes and recreates under a
	// new topic ID once some node has redeployed away from them. No
	// producer may target them; a node that (re)starts afterwards and
	// names them consumes or writes the new incarnation.
	Recreate []string
	// RetainToRecords makes retention move a log start onto the offset of
	// one of the channel's last three business records, the offsets
	// stamps claim, instead of anywhere up to the log end.
	RetainToRecords bool
	// StoreFaults is the number of steps the scheduler may run with a
	// store that fails mid-step; the host then discards the node and
	// rebuilds it from committed state (H3).
	StoreFaults int
}

// Scenario builds a Spec; it may draw the topology's shape from r.
type Scenario struct {
	Name  string
	Build func(r *rand.Rand) Spec
}

// Options configure a run.
type Options struct {
	// NewProtocol builds each node incarnation's protocol. Nil means
	// RealProtocol.
	NewProtocol NewProtocol
	// Fault makes every node shirk one host duty.
	Fault HostFault
	// Trace, when set, receives every trace line.
	Trace func(string)
}

// Stats are what a run exercised: the anti-vacuity evidence.
type Stats struct {
	Steps, Deliveries, Sends, Ticks           int
	Crashes, MidStepCrashes, CrashWhileHeld   int
	Restarts, Redeploys, RestoredHeld         int
	RedeploysRefused                          int
	PositionAdvances, PositionFolds           int
	SkippedRunFolds, Retentions, Truncations  int
	EdgeAborts, Recreated, SweptAfterRecreate int
	ReplaysDropped, StateResets               int
	FlushThenCrash, StoreFaults               int
	SharedClaims                              int // a sequence claim fed while another sender's mark had passed it
	InitOpenTxn, FetchOpenTxn                 int
	RecreatedWrites, RecreatedReads           int                   // sends to and deliveries from a recreated topic
	RetainedToRecord                          int                   // retention moved a log start exactly onto a record
	Released                                  int                   // Release delivered restored holds after a rescope
	GrewIntoCarried                           int                   // a redeploy grew an input its carried history names, still fetchable there
	GrewIntoFormerSink                        int                   // a redeploy grew an input from a sink it dropped, its own sends still fetchable
	KeptMarkClaims                            int                   // a sequence claim on a regrown input met only by a mark kept across the shrink
	RegrowUnresolved                          int                   // a stamp after a regrowth keeping another sender's unresolved claim on the regrown input
	WideClaimsHeld                            int                   // a held record claiming more than 8 channels per gate input (the lookup's binary search)
	DrainFoldsOntoMarker                      int                   // a drained queue folded onto a position reported while it was held, past a non-record offset
	UndecodableReplays                        int                   // a record whose stamp does not decode refetched below what the node accounted for
	GrewSeqCarried                            int                   // a redeploy grew an input where it carries, above the log start, records no offset claim covers
	CarriedSkips                              int                   // records the gate skipped because carried ancestry holds them by their sender's sequence
	SkipMarkClaims                            int                   // a delivery whose sequence claim only the mark of a skipped record met
	RestoreProbes                             [numRestoreProbes]int // restore and feed-contract probes passed, by kind (restorecheck.go)
	Held                                      bool                  // some node held a record at the gate
	SignedHeld                                bool                  // a node whose inputs' topic IDs differ in the high half's sign bit held a record
	LowSignHeld                               bool                  // ... or share the high half and differ in the low half's sign bit
	WideHeld                                  bool                  // a node with more than 16 inputs held a record
	HeldAboveZero                             bool                  // a task on a partition above 0 held a record
	held                                      bool
}

// Result is the outcome of one run.
type Result struct {
	Scenario   string
	Seed       uint64
	Drained    bool
	Violations []Violation
	Stats      Stats
	TraceHash  uint64
	// Err is the error that stopped the world, if one did: a protocol
	// refusal (errors.Is works) or a host failure.
	Err error
}

// Failed reports whether the run broke an obligation.
func (r *Result) Failed() bool { return len(r.Violations) > 0 }

// Has reports whether the run has a violation of kind k.
func (r *Result) Has(k ViolationKind) bool {
	return slices.ContainsFunc(r.Violations, func(v Violation) bool { return v.Kind == k })
}

// World is one simulated deployment: a broker, stage tasks hosted by
// SimNodes, edge clients, the oracle, and a seeded scheduler.
type World struct {
	Broker    *Broker
	Oracle    *Oracle
	Nodes     []*SimNode
	Producers []*EdgeProducer

	spec Spec
	opts Options
	// shapes: edge producers shape their records when its low bit is 0
	// (EdgeProducer.shape).
	shapes uint64
	rng    *rand.Rand
	stats  Stats
	hash   hash.Hash64
	step   int

	crashes, retention, truncations, storeFaults int
	redeployEnds                                 map[headers.Channel]int64
	err                                          error
	recreated                                    int
	deletedAt                                    map[headers.TopicID]int // topic → step of its deletion
	recreatedIDs                                 map[headers.TopicID]bool
}

// snapshotEnds records every channel's log end (for AtFirstRedeploy).
func (w *World) snapshotEnds() {
	w.redeployEnds = map[headers.Channel]int64{}
	for _, ts := range w.spec.Topics {
		if t := w.Broker.Topic(ts.Name); t != nil {
			for p := range t.Partitions() {
				w.redeployEnds[t.Channel(int32(p))] = w.Broker.End(t.Channel(int32(p)))
			}
		}
	}
}

// NewWorld builds a world from spec, seeded by seed.
func NewWorld(spec Spec, seed uint64, opts Options) (*World, error) {
	if opts.NewProtocol == nil {
		opts.NewProtocol = RealProtocol
	}
	if spec.Steps == 0 {
		spec.Steps = 20000
	}
	w := &World{Broker: NewBroker(), Oracle: NewOracle(), spec: spec, opts: opts,
		rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), hash: fnv.New64a(),
		crashes: spec.Crashes, retention: spec.Retention, truncations: spec.Truncations, storeFaults: spec.StoreFaults,
		deletedAt: map[headers.TopicID]int{}, recreatedIDs: map[headers.TopicID]bool{}}
	// Topic IDs with and without the sign bit, drawn per seed (issue 34).
	w.Broker.IDSalt = splitmix(seed ^ 0x1d5a17)
	// Record shapes a real host's records have and a stamping producer's
	// do not (empty keys, tiny and empty user headers, unstamped records),
	// on half the seeds, drawn apart from the scheduler's source (issue 34).
	w.shapes = splitmix(seed ^ 0x5a9e5)
	for _, t := range spec.Topics {
		w.Broker.CreateTopic(t.Name, t.Partitions)
	}
	for _, ns := range spec.Nodes {
		ns.Redeploys = slices.Clone(ns.Redeploys) // the node adjusts them
		n := &SimNode{spec: ns, w: w, actor: w.Oracle.Actor(ns.Name, true), store: protocol.NewMemStore(),
			pos: map[headers.Channel]int64{}, ticks: ns.Ticks, sinks: ns.Sinks,
			inv: newWatermarks(), invCommitted: newWatermarks(), reached: map[headers.Channel]int64{}}
		ins, err := n.resolve(ns.Inputs)
		if err != nil {
			return nil, err
		}
		n.inputs = ins
		if ns.Logic == nil {
			n.spec.Logic = Sink()
		}
		w.Nodes = append(w.Nodes, n)
	}
	for _, ps := range spec.Producers {
		p := &EdgeProducer{spec: ps, w: w, actor: w.Oracle.Actor(ps.Name, false), pos: map[headers.Channel]int64{}}
		for _, r := range ps.Targets {
			t := w.Broker.Topic(r.Topic)
			if t == nil || int(r.Partition) >= t.Partitions() {
				return nil, fmt.Errorf("sim: producer %s: no topic partition %s/%d", ps.Name, r.Topic, r.Partition)
			}
			p.targets = append(p.targets, t.Channel(r.Partition))
		}
		for _, r := range ps.Observe {
			t := w.Broker.Topic(r.Topic)
			if t == nil || int(r.Partition) >= t.Partitions() {
				return nil, fmt.Errorf("sim: producer %s: no topic partition %s/%d", ps.Name, r.Topic, r.Partition)
			}
			p.observe = append(p.observe, t.Channel(r.Partition))
		}
		if len(p.targets) == 0 {
			return nil, fmt.Errorf("sim: producer %s has no targets", ps.Name)
		}
		w.Producers = append(w.Producers, p)
	}
	w.Broker.Protect = w.protect
	return w, nil
}

// protect is the retention guard (H6): the lowest position any started
// subscriber of ch has not fetched.
func (w *World) protect(ch headers.Channel) (int64, bool) {
	if w.opts.Fault == IgnoreLogStart {
		return 0, false
	}
	lim, ok := int64(0), false
	take := func(p int64) {
		if !ok || p < lim {
			lim, ok = p, true
		}
	}
	for _, n := range w.Nodes {
		if n.state == notStarted {
			// A task that joins with the world is a member of its group
			// already: its history is protected from the start.
			if n.spec.Join == JoinAtStart && slices.Contains(n.inputs, ch) {
				take(0)
			}
			continue
		}
		if p, has := n.pos[ch]; has {
			take(p)
		}
	}
	for _, p := range w.Producers {
		if slices.Contains(p.observe, ch) {
			take(p.pos[ch])
		}
	}
	return lim, ok
}

func (w *World) trace(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	fmt.Fprintf(w.hash, "%d %s\n", w.step, s)
	if w.opts.Trace != nil {
		w.opts.Trace(fmt.Sprintf("%6d %s", w.step, s))
	}
}

type action struct {
	name     string
	weight   int
	progress bool // counts against drain
	run      func(ctx context.Context) error
	node     *SimNode
}

// actions lists what the scheduler may do now, in a fixed order.
func (w *World) actions() []action {
	if a, ok := w.forcedRedeploy(); ok {
		return []action{a}
	}
	var acts []action
	producersDone := true
	for _, p := range w.Producers {
		if !p.Done() {
			producersDone = false
			acts = append(acts, action{name: "op " + p.spec.Name, weight: 4, progress: true, run: func(context.Context) error { return p.op() }})
		}
	}
	holding := 0
	for _, n := range w.Nodes {
		switch n.state {
		case down:
			acts = append(acts, action{name: "restart " + n.spec.Name, weight: 3, progress: true, node: n, run: n.start})
		case notStarted:
			if n.spec.Join == JoinAtStart || (n.spec.Join == JoinAfterProducers && producersDone) ||
				(n.spec.Join == JoinAfterRestart && w.stats.Restarts > 0) ||
				(n.spec.Join == JoinWhen && n.spec.JoinWhen != nil && n.spec.JoinWhen(w)) {
				acts = append(acts, action{name: "join " + n.spec.Name, weight: 3, progress: true, node: n, run: n.start})
			}
		case up:
			for _, ch := range n.inputs {
				if n.fetchable(ch) {
					acts = append(acts, action{name: "fetch " + n.spec.Name + " " + ch.String(), weight: 6, progress: true, node: n,
						run: func(context.Context) error { return n.inStep(func() error { return n.fetch(ch) }) }})
				} else if n.advanceable(ch) {
					acts = append(acts, action{name: "advance " + n.spec.Name + " " + ch.String(), weight: 2, progress: true, node: n,
						run: func(context.Context) error { return n.inStep(func() error { return n.advance(ch) }) }})
				}
			}
			if n.ticks > 0 {
				acts = append(acts, action{name: "tick " + n.spec.Name, weight: 1, progress: true, node: n,
					run: func(context.Context) error { return n.inStep(n.tick) }})
			}
			if n.Held() > 0 {
				holding++
			}
		}
	}
	progress := len(acts) > 0
	if !progress {
		// Quiet: late joiners waiting for quiet may start now.
		for _, n := range w.Nodes {
			if n.state == notStarted {
				acts = append(acts, action{name: "join " + n.spec.Name, weight: 1, progress: true, node: n, run: n.start})
			}
		}
		return acts
	}
	// Optional actions, drawn only while the world still progresses.
	if w.crashes > 0 {
		for _, n := range w.Nodes {
			if n.state != up {
				continue
			}
			if n.spec.CrashWeight < 0 {
				continue
			}
			h := n.Held() > 0
			if w.crashes == 1 && !h {
				continue // the last crash is reserved for a holding node
			}
			wt := max(1, n.spec.CrashWeight)
			if h {
				wt *= 2
			}
			acts = append(acts, action{name: "crash " + n.spec.Name, weight: wt, node: n, run: n.crash})
		}
	}
	if w.truncations > 0 {
		for _, n := range w.Nodes {
			if n.state == up {
				acts = append(acts, action{name: "truncate " + n.spec.Name, weight: 1, node: n, run: func(ctx context.Context) error {
					w.truncations--
					w.stats.Truncations++
					n.swept = w.step
					if w.recreated > 0 {
						w.stats.SweptAfterRecreate++
					}
					return n.inStep(func() error {
						if err := n.proto.TruncateToLogStarts(ctx); err != nil {
							return err
						}
						n.checkInvariants("TruncateToLogStarts")
						return nil
					})
				}})
			}
		}
	}
	if w.retention > 0 {
		acts = append(acts, action{name: "retention", weight: 1, run: w.retain})
	}
	if w.storeFaults > 0 {
		for _, n := range w.Nodes {
			for _, ch := range n.inputs {
				if n.state == up && n.fetchable(ch) {
					acts = append(acts, action{name: "store-fault " + n.spec.Name + " " + ch.String(), weight: 1, node: n,
						run: func(context.Context) error { return n.faultyFetch(ch) }})
					break
				}
			}
		}
	}
	if w.recreated < len(w.spec.Recreate) && w.stats.Redeploys > 0 && !w.declared(w.spec.Recreate[w.recreated]) {
		name := w.spec.Recreate[w.recreated]
		acts = append(acts, action{name: "recreate " + name, weight: 4, run: func(context.Context) error {
			w.recreated++
			if old := w.Broker.Topic(name); old != nil {
				w.deletedAt[old.ID] = w.step
				w.Broker.DeleteTopic(name)
				w.recreatedIDs[w.Broker.CreateTopic(name, old.Partitions()).ID] = true
				w.stats.Recreated++
			}
			return nil
		}})
	}
	return acts
}

// forcedRedeploy is the crash of an up node whose next redeploy is Force
// and whose condition holds: the only action then, drawn from no budget.
func (w *World) forcedRedeploy() (action, bool) {
	for _, n := range w.Nodes {
		if n.state != up {
			continue
		}
		for i := range n.spec.Redeploys {
			rd := &n.spec.Redeploys[i]
			if !rd.Force || rd.At != n.restarts+1 || n.forced[i] || (rd.When != nil && !rd.When(n)) {
				continue
			}
			if n.forced == nil {
				n.forced = map[int]bool{}
			}
			n.forced[i] = true
			return action{name: "crash " + n.spec.Name + " (forced redeploy)", weight: 1, progress: true, node: n, run: func(ctx context.Context) error {
				w.crashes++ // outside the budget
				return n.crash(ctx)
			}}, true
		}
	}
	return action{}, false
}

// declared reports whether a started node's current scope names the live
// incarnation of topic name, as an input or a sink: such a topic is not
// deleted under it.
func (w *World) declared(name string) bool {
	t := w.Broker.Topic(name)
	if t == nil {
		return false
	}
	for _, n := range w.Nodes {
		if n.state == notStarted {
			continue
		}
		if slices.Contains(n.sinks, name) || slices.ContainsFunc(n.inputs, func(ch headers.Channel) bool { return ch.Topic == t.ID }) {
			return true
		}
	}
	return false
}

// retain advances one channel's log start toward its end, as retention
// does, within the subscribers' guard.
func (w *World) retain(context.Context) error {
	w.retention--
	var chans []headers.Channel
	for _, ts := range w.spec.Topics {
		if t := w.Broker.Topic(ts.Name); t != nil {
			for p := range t.Partitions() {
				chans = append(chans, t.Channel(int32(p)))
			}
		}
	}
	if len(chans) == 0 {
		return nil
	}
	ch := chans[w.rng.IntN(len(chans))]
	end := w.Broker.End(ch)
	to := w.Broker.LogStart(ch) + w.rng.Int64N(end-w.Broker.LogStart(ch)+1)
	if w.spec.RetainToRecords {
		var recs []int64
		for off := end - 1; off >= w.Broker.LogStart(ch) && len(recs) < 3; off-- {
			if e := w.Broker.Entry(ch, off); e != nil && e.Kind == Business {
				recs = append(recs, off)
			}
		}
		if len(recs) > 0 {
			to = recs[w.rng.IntN(len(recs))]
		}
	}
	got := w.Broker.AdvanceLogStart(ch, to)
	w.stats.Retentions++
	if got == to && w.spec.RetainToRecords {
		w.stats.RetainedToRecord++
	}
	w.trace("retention %v→%d", ch, got)
	return nil
}

// inStep runs body as one transactional step of n.
func (n *SimNode) inStep(body func() error) error {
	n.begin()
	if err := body(); err != nil {
		return err
	}
	return n.commit()
}

// crash takes n down: idle, or mid-step — a fetch or tick step whose work
// is done and whose transaction then aborts.
func (n *SimNode) crash(context.Context) error {
	w := n.w
	w.crashes--
	w.stats.Crashes++
	if n.Held() > 0 {
		w.stats.CrashWhileHeld++
	}
	var bodies []func() error
	for _, ch := range n.inputs {
		if n.fetchable(ch) {
			bodies = append(bodies, func() error { return n.fetch(ch) })
		}
	}
	if n.ticks > 0 {
		bodies = append(bodies, n.tick)
	}
	if len(bodies) > 0 && w.rng.IntN(2) == 0 {
		w.stats.MidStepCrashes++
		w.trace("crash-mid-step %s", n.spec.Name)
		n.begin()
		if err := bodies[w.rng.IntN(len(bodies))](); err != nil {
			return err
		}
		if w.rng.IntN(2) == 0 {
			// Between Flush and commit: the store's writes are staged,
			// and die with the step.
			w.stats.FlushThenCrash++
			if err := n.proto.Flush(); err != nil {
				return err
			}
			n.checkInvariants("Flush")
		}
		n.abort()
		return nil
	}
	w.trace("crash %s", n.spec.Name)
	n.down()
	return nil
}

// Run runs the world until it drains or its step budget runs out, then
// checks completeness, and returns the result.
func (w *World) Run(ctx context.Context) Result {
	drained := false
	for w.step = 0; w.step < w.spec.Steps; w.step++ {
		w.Oracle.step = w.step
		acts := w.actions()
		if len(acts) == 0 {
			drained = true
			break
		}
		total := 0
		for _, a := range acts {
			total += a.weight
		}
		x := w.rng.IntN(total)
		var a action
		for _, a = range acts {
			if x < a.weight {
				break
			}
			x -= a.weight
		}
		w.trace("%s", a.name)
		if err := w.runAction(ctx, &a); err != nil {
			w.err = err
			w.Oracle.violate(HostError, nodeName(a.node), a.name+": "+err.Error())
			break
		}
		if w.stats.held {
			w.stats.Held = true
		}
	}
	w.stats.Steps = w.step
	if !drained && len(w.Oracle.violations) == 0 {
		w.Oracle.violate(Wedged, "world", fmt.Sprintf("not drained after %d steps%s", w.step, w.holdSummary()))
	}
	if drained {
		for _, n := range w.Nodes {
			if h := n.Held(); h > 0 {
				w.Oracle.violate(Wedged, n.spec.Name, fmt.Sprintf("%d records still held at drain%s", h, w.holdSummary()))
			}
			w.Oracle.Complete(n.actor, w.Broker)
		}
	}
	for _, n := range w.Nodes {
		if n.proto != nil {
			c := n.proto.Counters()
			n.folds[0] += c.PositionFolds
			n.folds[1] += c.SkippedRunFolds
			n.folds[2] += c.CarriedSkipped
		}
		w.stats.PositionFolds += int(n.folds[0])
		w.stats.SkippedRunFolds += int(n.folds[1])
		w.stats.CarriedSkips += int(n.folds[2])
	}
	return Result{Drained: drained, Violations: w.Oracle.violations, Stats: w.stats, TraceHash: w.hash.Sum64(), Err: w.err}
}

func nodeName(n *SimNode) string {
	if n == nil {
		return "world"
	}
	return n.spec.Name
}

// holdSummary describes the first gating head of every holding node, when
// the protocol can explain itself.
func (w *World) holdSummary() string {
	s := ""
	for _, n := range w.Nodes {
		if n.Held() > 0 {
			s += fmt.Sprintf("; %s holds %d", n.spec.Name, n.Held())
			s += explain(n.proto)
		}
	}
	return s
}

// RunScenario builds and runs sc with seed.
func RunScenario(ctx context.Context, sc Scenario, seed uint64, opts Options) Result {
	spec := sc.Build(rand.New(rand.NewPCG(seed, 0x5eed)))
	w, err := NewWorld(spec, seed, opts)
	if err != nil {
		return Result{Scenario: sc.Name, Seed: seed, Violations: []Violation{{Kind: HostError, Node: "world", Detail: err.Error()}}}
	}
	r := w.Run(ctx)
	r.Scenario, r.Seed = sc.Name, seed
	return r
}

// explain renders a protocol's first unmet claim, when it can explain its
// holds.
func explain(p Protocol) string {
	ex, ok := p.(interface {
		ExplainHolds() ([]protocol.Hold, error)
	})
	if !ok {
		return ""
	}
	hs, err := ex.ExplainHolds()
	if err != nil || len(hs) == 0 {
		return ""
	}
	h := hs[0]
	s := fmt.Sprintf(" (head %v depth %d", h.Coordinate, h.Depth)
	if len(h.Waiting) > 0 {
		c := h.Waiting[0]
		s += fmt.Sprintf(", %s on %v offset %d seq %d frontier %d position %d", c.Diagnosis, c.Channel, c.Offset, c.Seq, c.Frontier, c.Position)
	}
	return s + ")"
}

// runAction runs one action, turning a panic in the protocol or the host
// into an error: a conformance kit reports a crashing subject, it does not
// crash with it.
func (w *World) runAction(ctx context.Context, a *action) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return a.run(ctx)
}
