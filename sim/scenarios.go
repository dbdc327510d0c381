package sim

import (
	"math/rand/v2"

	"github.com/parsley-go/parsley/protocol"
)

func topics(parts int, names ...string) []TopicSpec {
	out := make([]TopicSpec, len(names))
	for i, n := range names {
		out[i] = TopicSpec{Name: n, Partitions: parts}
	}
	return out
}

func in(names ...string) []Ref {
	out := make([]Ref, len(names))
	for i, n := range names {
		out[i] = Ref{Topic: n}
	}
	return out
}

// OneOf sends every delivered record to one sink drawn at random.
func OneOf(sinks ...string) Logic {
	return func(r *rand.Rand, d *protocol.Delivery) []Emission {
		return []Emission{{Topic: sinks[r.IntN(len(sinks))], Partition: -1, Key: d.Key, Value: d.Value}}
	}
}

// Then runs several logics on each delivery, in order.
func Then(ls ...Logic) Logic {
	return func(r *rand.Rand, d *protocol.Delivery) []Emission {
		var out []Emission
		for _, l := range ls {
			out = append(out, l(r, d)...)
		}
		return out
	}
}

func producer(name string, ops int, txn bool, targets ...string) ProducerSpec {
	return ProducerSpec{Name: name, Targets: in(targets...), Ops: ops, Transactional: txn}
}

// Scenarios returns the scenario suite (reference 06, issue 4 §6), each
// built so the machinery it targets is what orders its deliveries.
func Scenarios() []Scenario {
	return append([]Scenario{
		{Name: "linear", Build: func(r *rand.Rand) Spec {
			// a → A → b → B → c; C consumes the two ends, so the claims
			// on a travel two hops through stamps.
			return Spec{Topics: topics(1, "a", "b", "c"),
				Producers: []ProducerSpec{producer("p", 12, r.IntN(2) == 0, "a")},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("a"), Sinks: []string{"b"}, Logic: Forward("b")},
					{Name: "B", Inputs: in("b"), Sinks: []string{"c"}, Logic: Forward("c")},
					{Name: "C", Inputs: in("a", "c")},
				}, Crashes: 3}
		}},
		{Name: "fanout", Build: func(r *rand.Rand) Spec {
			// A sends each record to b then c: C, consuming both, needs the
			// sequence claim on b to order them.
			return Spec{Topics: topics(1, "a", "b", "c"),
				Producers: []ProducerSpec{producer("p", 12, true, "a")},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("a"), Sinks: []string{"b", "c"}, Logic: Forward("b", "c")},
					{Name: "C", Inputs: in("b", "c")},
					{Name: "D", Inputs: in("a", "c")},
				}, Crashes: 3}
		}},
		{Name: "fanin", Build: func(r *rand.Rand) Spec {
			// q observes a before producing to b (observed causality from a
			// plain consumer); A merges a and b into c; C consumes a and c.
			return Spec{Topics: topics(1, "a", "b", "c"),
				Producers: []ProducerSpec{producer("p", 10, true, "a"),
					{Name: "q", Targets: in("b"), Observe: in("a"), Ops: 8}},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("a", "b"), Sinks: []string{"c"}, Logic: Forward("c")},
					{Name: "C", Inputs: in("b", "c")},
					{Name: "D", Inputs: in("a", "c")},
				}, Crashes: 3}
		}},
		{Name: "diamond", Build: func(r *rand.Rand) Spec {
			return Spec{Topics: topics(1, "a", "b", "c", "d"),
				Producers: []ProducerSpec{producer("p", 10, true, "a")},
				Nodes: []NodeSpec{
					{Name: "B", Inputs: in("a"), Sinks: []string{"b"}, Logic: Forward("b")},
					{Name: "C", Inputs: in("a"), Sinks: []string{"c"}, Logic: Forward("c")},
					{Name: "D", Inputs: in("b", "c"), Sinks: []string{"d"}, Logic: Forward("d")},
					{Name: "E", Inputs: in("a", "d")},
				}, Crashes: 3}
		}},
		{Name: "triangle", Build: func(r *rand.Rand) Spec {
			// base → A → derived; C consumes both: derived records wait for
			// their base, which lags behind a transactional, abort-prone log.
			return Spec{Topics: topics(1, "base", "derived"),
				Producers: []ProducerSpec{producer("p", 14, true, "base")},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("base"), Sinks: []string{"derived"}, Logic: Forward("derived")},
					{Name: "C", Inputs: in("base", "derived")},
				}, Crashes: 3}
		}},
		{Name: "request-reply", Build: func(r *rand.Rand) Spec {
			// The server writes the effect before the reply; the client
			// stage consumes both and must see the effect first. On three
			// seeds in four the server is a legacy host (a 0.2 writer),
			// whose trailing-marker claims exercise the skipped-run fold.
			legacy := r.IntN(4) != 0
			return Spec{Topics: topics(1, "req", "effect", "reply"),
				Producers: []ProducerSpec{producer("client", 10, false, "req")},
				Nodes: []NodeSpec{
					{Name: "server", Inputs: in("req"), Sinks: []string{"effect", "reply"}, Logic: Forward("effect", "reply"), LegacyHost: legacy},
					{Name: "client-stage", Inputs: in("reply", "effect")},
				}, Crashes: 3}
		}},
		{Name: "feedback", Build: func(r *rand.Rand) Spec {
			// A damped cycle x → A → y → B → x, with D consuming both sides
			// (the loop's own nodes cannot gate each other).
			return Spec{Topics: topics(1, "x", "y"),
				Producers: []ProducerSpec{{Name: "p", Targets: in("x"), Ops: 6, MaxHops: 4, Transactional: true}},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("x"), Sinks: []string{"y"}, Logic: Damped("y")},
					{Name: "B", Inputs: in("y"), Sinks: []string{"x"}, Logic: Damped("x")},
					{Name: "D", Inputs: in("x", "y")},
				}, Crashes: 3}
		}},
		{Name: "filter", Build: func(r *rand.Rand) Spec {
			// Filters leave quiet sinks whose logs end in commit markers; a
			// legacy host's restart seeds own outputs at end offsets and so
			// claims a trailing marker, which only a position advance
			// resolves.
			return Spec{Topics: topics(1, "a", "b", "c"),
				Producers: []ProducerSpec{producer("p", 14, true, "a")},
				Nodes: []NodeSpec{
					{Name: "F", Inputs: in("a"), Sinks: []string{"b", "c"}, Logic: Then(Filter(0.3, "b"), Filter(0.3, "c")), LegacyHost: true},
					{Name: "G", Inputs: in("b", "c")},
				}, Crashes: 4}
		}},
		{Name: "trailing-marker", Build: func(r *rand.Rand) Spec {
			// F (a legacy host) writes to b until it restarts, then only to
			// c: b's log ends in a commit marker that the restart's
			// end-offset seed claims in every later c record. Only a position advance reveals it,
			// and only the seed orders b's records before c's at G, which
			// joins once everything else is done.
			return Spec{Topics: topics(1, "a", "b", "c"),
				Producers: []ProducerSpec{producer("p", 12, r.IntN(2) == 0, "a")},
				Nodes: []NodeSpec{
					{Name: "F", Inputs: in("a"), Sinks: []string{"b", "c"}, Logic: Forward("b"), LogicAfterRestart: Forward("c"), LegacyHost: true},
					{Name: "G", Inputs: in("b", "c"), Join: JoinWhenQuiet},
				}, Crashes: 2}
		}},
		{Name: "head-fold", Build: func(r *rand.Rand) Spec {
			// X (a legacy host) writes b until it restarts, then c; its
			// restart seed makes every c record claim the commit marker
			// ending X's b history.
			// Y relays c into b, behind that marker. T, joining once all is
			// done, holds X's last b record (waiting on a) while Y's record
			// arrives behind it: only the skipped-run fold behind the held
			// head lets the c record, and so Y's record, deliver.
			return Spec{Topics: topics(1, "a", "b", "c"),
				Producers: []ProducerSpec{producer("p", 10, true, "a")},
				Nodes: []NodeSpec{
					{Name: "X", Inputs: in("a"), Sinks: []string{"b", "c"}, Logic: Forward("b"), LogicAfterRestart: Forward("c"), LegacyHost: true},
					{Name: "Y", Inputs: in("c"), Sinks: []string{"b"}, Logic: Forward("b")},
					{Name: "T", Inputs: in("a", "b", "c"), Join: JoinWhenQuiet},
				}, Crashes: 2}
		}},
		{Name: "multi-partition", Build: func(r *rand.Rand) Spec {
			// A spreads its sends over two partitions; T consumes both, and
			// only sequence claims order A's sends across them. On three
			// seeds in four A is a legacy host (a 0.2 writer).
			legacy := r.IntN(4) != 0
			return Spec{Topics: append(topics(1, "a"), TopicSpec{Name: "b", Partitions: 2}),
				Producers: []ProducerSpec{producer("p", 12, true, "a")},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("a"), Sinks: []string{"b"}, Logic: Then(Forward("b"), Forward("b")), LegacyHost: legacy},
					{Name: "T", Inputs: []Ref{{Topic: "b", Partition: 0}, {Topic: "b", Partition: 1}}},
				}, Crashes: 3}
		}},
		{Name: "ticks", Build: func(r *rand.Rand) Spec {
			// A ticking stage: the tick channel is consumed and produced, so
			// a tick returns through the gate carrying the node's past.
			return Spec{Topics: topics(1, "a", "out", "ticks"),
				Producers: []ProducerSpec{producer("p", 10, true, "a")},
				Nodes: []NodeSpec{
					{Name: "S", Inputs: in("a", "ticks"), Sinks: []string{"out", "ticks"}, Logic: Forward("out"), TickTopic: "ticks", Ticks: 6},
					{Name: "T", Inputs: in("out", "ticks")},
				}, Crashes: 3}
		}},
		{Name: "crash-chain", Build: func(r *rand.Rand) Spec {
			return Spec{Topics: topics(1, "a", "b", "c", "d"),
				Producers: []ProducerSpec{producer("p", 12, true, "a")},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("a"), Sinks: []string{"b"}, Logic: Forward("b")},
					{Name: "B", Inputs: in("a", "b"), Sinks: []string{"c"}, Logic: Forward("c")},
					{Name: "C", Inputs: in("b", "c"), Sinks: []string{"d"}, Logic: Forward("d")},
					{Name: "D", Inputs: in("a", "d")},
				}, Crashes: 8}
		}},
		{Name: "own-outputs", Build: func(r *rand.Rand) Spec {
			// A sends each record to b or c. T joins once everything else
			// is done and consumes both: A's prior-incarnation sends race
			// its later ones, and only the restart's own-outputs claim
			// relates them: the acknowledged sends, or on half the seeds,
			// where A is a legacy host, the end-offset seed.
			legacy := r.IntN(2) == 0
			return Spec{Topics: topics(1, "a", "b", "c"),
				Producers: []ProducerSpec{producer("p", 14, false, "a")},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("a"), Sinks: []string{"b", "c"}, Logic: OneOf("b", "c"), LegacyHost: legacy},
					{Name: "T", Inputs: in("b", "c"), Join: JoinWhenQuiet},
				}, Crashes: 2}
		}},
		{Name: "scope-shrink", Build: func(r *rand.Rand) Spec {
			// A consumes a and b, then restarts without b. T joins once all
			// else is done, consuming b from the start and c from where it
			// ended at the redeploy: what A delivered from b before the
			// restart is claimed in its later c records only by carried
			// ancestry, and T's b and c fetches race.
			return Spec{Topics: topics(1, "a", "b", "c"),
				// Separate producers: nothing on a claims b, so after the
				// shrink only carried ancestry remembers A's b past.
				Producers: []ProducerSpec{producer("pa", 8, false, "a"), producer("pb", 6, false, "b")},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("a", "b"), Sinks: []string{"c"}, Logic: Forward("c"),
						Redeploys: []Redeploy{{At: 1, Inputs: in("a"), Sinks: []string{"c"}}}},
					{Name: "T", Inputs: []Ref{{Topic: "b", From: Earliest}, {Topic: "c", From: AtFirstRedeploy}}, Join: JoinWhenQuiet},
				}, Crashes: 2}
		}},
		{Name: "scope-regrow", Build: func(r *rand.Rand) Spec {
			// A drops b at its first restart and takes it back at its
			// second: growth seeds b at the carried knowledge and resumes
			// past it, and T, consuming b and c from the start, checks that
			// nothing A delivered or claimed is lost or reordered.
			return Spec{Topics: topics(1, "a", "b", "c"),
				Producers: []ProducerSpec{producer("pa", 10, true, "a"), producer("pb", 10, true, "b")},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("a", "b"), Sinks: []string{"c"}, Logic: Forward("c"),
						Redeploys: []Redeploy{{At: 1, Inputs: in("a"), Sinks: []string{"c"}}, {At: 2, Inputs: in("a", "b"), Sinks: []string{"c"}}}},
					{Name: "T", Inputs: in("b", "c")},
				}, Crashes: 4}
		}},
		{Name: "former-sink", Build: func(r *rand.Rand) Spec {
			// A writes b and c, then restarts without b: its sends to b
			// fold into carried ancestry. b is then deleted and recreated
			// under a new ID; truncation sweeps must drop the old b from
			// A's stamps, and T keeps judging A's c output and a.
			return Spec{Topics: topics(1, "a", "b", "c"),
				Producers: []ProducerSpec{producer("p", 20, true, "a")},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("a"), Sinks: []string{"b", "c"}, Logic: Forward("b", "c"), LogicAfterRestart: Forward("c"),
						Redeploys: []Redeploy{{At: 1, Inputs: in("a"), Sinks: []string{"c"}}}},
					{Name: "T", Inputs: in("a", "c")},
				}, Crashes: 3, Truncations: 20, Recreate: []string{"b"}}
		}},
		{Name: "truncation", Build: func(r *rand.Rand) Spec {
			// Retention and truncation sweeps mid-history, and a from-earliest
			// joiner arriving after both.
			return Spec{Topics: topics(1, "a", "b", "c"),
				Producers: []ProducerSpec{producer("p", 14, true, "a")},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("a"), Sinks: []string{"b"}, Logic: Forward("b")},
					{Name: "B", Inputs: in("b"), Sinks: []string{"c"}, Logic: Forward("c")},
					{Name: "C", Inputs: in("a", "c")},
					{Name: "L", Inputs: in("a", "b", "c"), Join: JoinWhenQuiet},
				}, Crashes: 2, Retention: 6, Truncations: 6}
		}},
		{Name: "soak", Build: func(r *rand.Rand) Spec {
			// Most of the above in one world; on half the seeds A is a
			// legacy host, as a fleet mixing 0.2 writers is, so readers
			// also settle claims on its trailing markers.
			legacy := r.IntN(2) == 0
			return Spec{Topics: append(topics(1, "a", "b", "c", "d", "x", "y", "ticks"), TopicSpec{Name: "m", Partitions: 2}),
				Producers: []ProducerSpec{producer("p", 14, true, "a"),
					{Name: "q", Targets: in("b"), Observe: in("a"), Ops: 8},
					{Name: "f", Targets: in("x"), Ops: 4, MaxHops: 3, Transactional: true}},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("a", "b"), Sinks: []string{"c", "m"}, Logic: Then(Filter(0.7, "c"), Forward("m")), LegacyHost: legacy},
					{Name: "B", Inputs: in("c", "ticks"), Sinks: []string{"d", "ticks"}, Logic: Forward("d"), TickTopic: "ticks", Ticks: 4},
					{Name: "X", Inputs: in("x"), Sinks: []string{"y"}, Logic: Damped("y")},
					{Name: "Y", Inputs: in("y", "d"), Sinks: []string{"x"}, Logic: Damped("x")},
					{Name: "M", Inputs: []Ref{{Topic: "m", Partition: 0}, {Topic: "m", Partition: 1}, {Topic: "a"}}},
					{Name: "Z", Inputs: in("a", "d", "x", "y")},
				}, Crashes: 6, Retention: 4, Truncations: 4, Steps: 40000}
		}},
	}, append(families(), gapFamilies()...)...)
}

// LateJoiner is the late-joiner sequence-claim probe (reference 03): A
// sends its first record to b and every later one to c, so every c record
// carries A's sequence claim on b, which no consuming hop rewrites. T joins
// once b has its record, starting every input with from. An at-latest
// joiner can never deliver the claimed b record — it sits below its
// baseline — so the world wedges; a from-start joiner delivers it and
// drains.
func LateJoiner(from StartMode) Scenario {
	name := "late-joiner-earliest"
	if from == Latest {
		name = "late-joiner-latest"
	}
	return Scenario{Name: name, Build: func(r *rand.Rand) Spec {
		first := true
		logic := func(_ *rand.Rand, d *protocol.Delivery) []Emission {
			sink := "c"
			if first {
				sink, first = "b", false
			}
			return []Emission{{Topic: sink, Partition: 0, Key: d.Key, Value: d.Value}}
		}
		return Spec{Topics: topics(1, "a", "b", "c"),
			Producers: []ProducerSpec{producer("p", 8, false, "a")},
			Nodes: []NodeSpec{
				{Name: "A", Inputs: in("a"), Sinks: []string{"b", "c"}, Logic: logic},
				{Name: "T", Inputs: in("b", "c"), Start: from, Join: JoinWhen,
					JoinWhen: func(w *World) bool { return w.Broker.End(w.Broker.Topic("b").Channel(0)) > 0 }},
			}, Steps: 2000}
	}}
}

// CorruptStamp is the fail-closed probe: the producer's third record on a
// carries a vc header that does not decode. A's node must refuse it (the
// world stops with an error wrapping headers.ErrUndecodable) and must
// never deliver it.
func CorruptStamp() Scenario {
	return Scenario{Name: "corrupt-stamp", Build: func(r *rand.Rand) Spec {
		return Spec{Topics: topics(1, "a", "b"),
			Producers: []ProducerSpec{{Name: "p", Targets: in("a"), Ops: 6, CorruptAt: 3}},
			Nodes: []NodeSpec{
				{Name: "A", Inputs: in("a"), Sinks: []string{"b"}, Logic: Forward("b")},
				{Name: "B", Inputs: in("a", "b")},
			}}
	}}
}
