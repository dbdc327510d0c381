package sim

import (
	"math/rand/v2"

	"github.com/parsley-go/parsley/protocol"
)

// ToPartition sends every delivered record to partition p of each sink:
// co-partitioned hops.
func ToPartition(p int32, sinks ...string) Logic {
	return func(_ *rand.Rand, d *protocol.Delivery) []Emission {
		out := make([]Emission, 0, len(sinks))
		for _, s := range sinks {
			out = append(out, Emission{Topic: s, Partition: p, Key: d.Key, Value: d.Value})
		}
		return out
	}
}

func parts(name string, n int) Ref { return Ref{Topic: name, Partition: int32(n)} }

// families are the scenario families issue 13 added: shapes the first
// suite never generated, each aimed at a rule the oracle could not see.
func families() []Scenario {
	return []Scenario{
		{Name: "shared-senders", Build: func(r *rand.Rand) Spec {
			// Two stages send to b then c; S2 sends twice as often to b, so
			// its delivered sequence on b runs ahead of S1's. G gates c on
			// both senders' claims on b: a claim resolved by the wrong
			// sender's mark lets S1's c record pass its b record.
			return Spec{Topics: topics(1, "a", "b", "c"),
				Producers: []ProducerSpec{producer("p", 12, r.IntN(2) == 0, "a")},
				Nodes: []NodeSpec{
					{Name: "S1", Inputs: in("a"), Sinks: []string{"b", "c"}, Logic: Forward("b", "c")},
					{Name: "S2", Inputs: in("a"), Sinks: []string{"b", "c"}, Logic: Then(Forward("b"), Forward("b", "c"))},
					{Name: "G", Inputs: in("b", "c")},
				}, Crashes: 3}
		}},
		{Name: "replays", Build: func(r *rand.Rand) Spec {
			// Every restart refetches from anywhere between the log start
			// and the committed position: the replay guard, not the host,
			// keeps deliveries unique.
			return Spec{Topics: topics(1, "a", "b", "c"),
				Producers: []ProducerSpec{producer("p", 12, r.IntN(2) == 0, "a")},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("a"), Sinks: []string{"b", "c"}, Logic: Forward("b", "c"), Replays: true},
					{Name: "B", Inputs: in("a", "b"), Sinks: []string{"c"}, Logic: Filter(0.5, "c"), Replays: true},
					{Name: "C", Inputs: in("b", "c"), Replays: true},
				}, Crashes: 6}
		}},
		{Name: "wide", Build: func(r *rand.Rand) Spec {
			// W consumes all 18 partitions of w and a: a wide gate, where
			// each head's claims are read for 19 inputs at once. A spreads
			// each record over two random partitions, so sequence claims
			// cross them.
			ins := []Ref{{Topic: "a"}}
			for p := range 18 {
				ins = append(ins, parts("w", p))
			}
			return Spec{Topics: append(topics(1, "a"), TopicSpec{Name: "w", Partitions: 18}),
				Producers: []ProducerSpec{producer("p", 14, true, "a")},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("a"), Sinks: []string{"w"}, Logic: Then(Forward("w"), Forward("w"))},
					{Name: "W", Inputs: ins},
				}, Crashes: 3}
		}},
		{Name: "co-partitioned", Build: func(r *rand.Rand) Spec {
			// Tasks of one stage on partitions 0 and 1 of a, each writing
			// its own partition of b and c; the next stage's tasks consume
			// their partition of both and cross over into d; T consumes
			// d's partitions and a/1.
			spec := Spec{Topics: []TopicSpec{{"a", 2}, {"b", 2}, {"c", 2}, {"d", 2}},
				Producers: []ProducerSpec{{Name: "p", Targets: []Ref{parts("a", 0), parts("a", 1)}, Ops: 14, Transactional: true}},
				Crashes:   4}
			for p := range 2 {
				q := int32(p)
				spec.Nodes = append(spec.Nodes,
					NodeSpec{Name: "A" + string(rune('0'+p)), Partition: q, Inputs: []Ref{parts("a", p)}, Sinks: []string{"b", "c"}, Logic: ToPartition(q, "b", "c")},
					NodeSpec{Name: "B" + string(rune('0'+p)), Partition: q, Inputs: []Ref{parts("b", p), parts("c", p)}, Sinks: []string{"d"}, Logic: ToPartition(1-q, "d")})
			}
			spec.Nodes = append(spec.Nodes, NodeSpec{Name: "T", Partition: 1, Inputs: []Ref{parts("d", 0), parts("d", 1), parts("a", 1)}})
			return spec
		}},
		{Name: "open-txn", Build: func(r *rand.Rand) Spec {
			// q keeps transactions open across operations on a and on b,
			// A's sink: A fetches with the last stable offset below the log
			// end, and restarts seed its own outputs from an end offset
			// inside an open transaction that may still abort.
			return Spec{Topics: topics(1, "a", "b", "c"),
				Producers: []ProducerSpec{{Name: "q", Targets: in("a", "b"), Ops: 16, Transactional: true, OpenAcross: true}},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("a"), Sinks: []string{"b", "c"}, Logic: OneOf("b", "c")},
					{Name: "T", Inputs: in("a", "b", "c")},
				}, Crashes: 4}
		}},
		{Name: "shrink-ancestry", Build: func(r *rand.Rand) Spec {
			// pb writes x and b, so b's records claim x. A consumes a and
			// b, then drops b: only b's advertised clock, folded into
			// carried ancestry, still claims the x records A's past holds.
			return Spec{Topics: topics(1, "a", "b", "c", "x"),
				Producers: []ProducerSpec{producer("pa", 8, false, "a"), producer("pb", 10, false, "x", "b")},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("a", "b"), Sinks: []string{"c"}, Logic: Forward("c"),
						Redeploys: []Redeploy{{At: 1, Inputs: in("a"), Sinks: []string{"c"}}}},
					{Name: "T", Inputs: in("x", "c")},
				}, Crashes: 2}
		}},
		{Name: "regrow-seq", Build: func(r *rand.Rand) Spec {
			// S writes b and d, so b's records carry S's sequence claims on
			// d. A drops b and takes it back; growth must seed b from what
			// A delivered or carries, and T judges b, c and d.
			return Spec{Topics: topics(1, "a", "s", "b", "c", "d"),
				Producers: []ProducerSpec{producer("pa", 10, true, "a"), producer("ps", 10, true, "s")},
				Nodes: []NodeSpec{
					{Name: "S", Inputs: in("s"), Sinks: []string{"d", "b"}, Logic: Forward("d", "b")},
					{Name: "A", Inputs: in("a", "b"), Sinks: []string{"c"}, Logic: Forward("c"),
						Redeploys: []Redeploy{{At: 1, Inputs: in("a"), Sinks: []string{"c"}}, {At: 2, Inputs: in("a", "b"), Sinks: []string{"c"}}}},
					{Name: "T", Inputs: in("b", "c", "d")},
				}, Crashes: 6}
		}},
		{Name: "sender-reset", Build: func(r *rand.Rand) Spec {
			// A loses its store at its first restart and keeps sending to
			// b then c under the same sender identity; G, which gated on
			// A's old sequences, must not take its new claims as met.
			return Spec{Topics: topics(1, "a", "b", "c"),
				Producers: []ProducerSpec{producer("p", 14, true, "a")},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("a"), Sinks: []string{"b", "c"}, Logic: Forward("b", "c"), ResetAt: 1},
					{Name: "G", Inputs: in("b", "c")},
				}, Crashes: 2}
		}},
		{Name: "store-faults", Build: func(r *rand.Rand) Spec {
			// Steps whose store fails mid-step, crashes between Flush and
			// commit, on a chain that holds.
			return Spec{Topics: topics(1, "a", "b", "c"),
				Producers: []ProducerSpec{producer("p", 12, true, "a")},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("a"), Sinks: []string{"b", "c"}, Logic: Forward("b", "c")},
					{Name: "B", Inputs: in("a", "b", "c")},
				}, Crashes: 4, StoreFaults: 6}
		}},
		{Name: "truncate-at-claim", Build: func(r *rand.Rand) Spec {
			// Retention moves a's log start exactly onto the records B's
			// clocks claim (through b), then sweeps: the entry sitting at
			// the log start is still a real ancestor of B's sends and must
			// stay in its stamps. B's ticks send without a new delivery
			// folding the claim back in.
			return Spec{Topics: topics(1, "a", "b", "c", "t"),
				Producers: []ProducerSpec{producer("p", 10, r.IntN(2) == 0, "a")},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("a"), Sinks: []string{"b"}, Logic: Forward("b")},
					{Name: "B", Inputs: in("b", "t"), Sinks: []string{"c", "t"}, Logic: Forward("c"), TickTopic: "t", Ticks: 10},
					{Name: "C", Inputs: in("a", "c")},
				}, Crashes: 2, Retention: 12, Truncations: 12, RetainToRecords: true}
		}},
		{Name: "shrink-release", Build: func(r *rand.Rand) Spec {
			// q observes b before writing a, so a's records claim b and
			// b's claim nothing on a. A joins once both logs are written,
			// so its fetches race; its one crash comes while it holds a
			// records waiting on b, then restarts without b: the claims on b no
			// longer gate, and Release must deliver the restored holds the
			// shrink set free.
			return Spec{Topics: topics(1, "a", "b", "c"),
				Producers: []ProducerSpec{producer("pb", 20, false, "b"),
					{Name: "q", Targets: in("a"), Observe: in("b"), Ops: 20}},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("a", "b"), Sinks: []string{"c"}, Logic: Forward("c"), Join: JoinAfterProducers,
						Redeploys: []Redeploy{{At: 1, Inputs: in("a"), Sinks: []string{"c"}}}},
					{Name: "T", Inputs: in("a", "c")},
				}, Crashes: 1}
		}},
		{Name: "recreate-reuse", Build: func(r *rand.Rand) Spec {
			// A drops its sink b, b is recreated under a new ID, and A's
			// second redeploy writes the new b again; L joins after the
			// recreation and consumes the new b with c.
			return Spec{Topics: topics(1, "a", "b", "c"),
				Producers: []ProducerSpec{producer("p", 16, true, "a")},
				Nodes: []NodeSpec{
					{Name: "A", Inputs: in("a"), Sinks: []string{"b", "c"}, Logic: Forward("b", "c"),
						Redeploys: []Redeploy{{At: 1, Inputs: in("a"), Sinks: []string{"c"}, Logic: Forward("c")},
							{At: 2, Inputs: in("a"), Sinks: []string{"b", "c"}, Logic: Forward("b", "c")}}},
					{Name: "L", Inputs: in("b", "c"), Join: JoinWhen, JoinWhen: func(w *World) bool { return w.stats.Recreated > 0 }},
				}, Crashes: 4, Truncations: 10, Recreate: []string{"b"}}
		}},
	}
}
