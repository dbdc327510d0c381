// Package stage runs stream-processing stages with causal delivery order
// and exactly-once processing on Kafka.
//
// A record reaches a stage's logic only after every cause the stage
// consumes has been delivered there: when A causally precedes B, every stage
// subscribed to both of their topics processes A before B. Safety is never
// traded for progress: a record whose causes have not arrived waits (it is
// held, durably) and nothing is delivered early on a timeout.
//
// # Functional core, imperative edges
//
// Your logic is pure. Topics are typed values declared once with their
// codecs; a Handler maps a delivered Message to Emissions, minted by the
// sink topic itself (topic.Send(key, value)); a Fold maps a key's state and
// a message to a Step: the next state and the emissions. The runtime does
// everything imperative — gating, decoding, state, stamping, partitioning,
// the transaction:
//
//	orders := stage.NewTopic("orders", stage.String(), stage.JSON[Order]())
//	payments := stage.NewTopic("payments", stage.String(), stage.JSON[Payment]())
//	settled := stage.NewTopic("settlements", stage.String(), stage.JSON[Settlement]())
//
//	b := stage.WithState(stage.Named("settlement"), stage.JSON[Balance](), Balance{})
//	stage.OnFold(b, orders, func(bal Balance, m stage.Message[string, Order]) (stage.Step[Balance], error) {
//		return stage.Next(bal.Order(m.Value)), nil
//	})
//	stage.OnFold(b, payments, func(bal Balance, m stage.Message[string, Payment]) (stage.Step[Balance], error) {
//		bal = bal.Pay(m.Value)
//		return stage.Next(bal, settled.Send(m.Key, bal.Settlement())), nil
//	})
//	settlement, err := b.Into(settled).Build()
//	...
//	err = stage.Run(ctx, stage.Config{ApplicationID: "shop", InstanceID: host, Brokers: brokers, StateDir: dir}, settlement)
//
// # Steps and exactly-once
//
// The application is one consumer group (the ApplicationID) with one
// transactional producer per instance. A co-partitioning balancer gives
// partition p of every source topic to the same instance; a task is
// (stage, p) and has its own causal node (package protocol). A step is one
// Kafka transaction over several polls (of up to Config.MaxPollRecords
// records each): it polls on until Config.CommitInterval has passed, it
// holds Config.MaxStepRecords, or nothing more is fetched, whichever comes
// first. Its records are fed to the nodes, released records reach user
// logic in causal order, emissions are encoded, partitioned (Kafka's murmur2
// of the encoded key; a nil key goes to the task's partition modulo the
// sink's count), stamped for exactly that partition and produced, and the
// state the step changed is written to the stage's changelog — all inside
// the transaction, with the consumed offsets. Control records (transaction
// markers) only advance the nodes' view of the consumer position; they are
// never delivered.
//
// If the transaction does not commit — a handler error, a panic, a codec
// failure, a rebalance, a broker error — nothing of the step is visible:
// the local stores are untouched, every node is rebuilt from committed
// state and the same records are processed again. A failed step then
// follows Config.OnStepError (default: Run stops with a *StepError naming
// the stage and the record). A fenced producer or a timed-out transaction
// makes the client unusable: Run builds a new one and rejoins.
//
// # State
//
// Each task keeps its protocol state, its held records and its fold state
// in a SQLite file under Config.StateDir. SQLite cannot join a Kafka
// transaction, so the changelog topic "<ApplicationID>-<stage>-changelog"
// (compacted, one partition per task) is the durable copy: the step's
// writes go there inside the transaction, and SQLite commits after Kafka
// did, a few committed steps at a time, with the changelog offset it
// reflects. A task that starts — after a crash, on another instance, or
// with its file deleted — first replays its changelog partition from that
// checkpoint. Fold state is keyed by the
// message key's encoded bytes (a nil key is distinct from an empty one).
//
// # Where a rebuilt task starts (host duty H5)
//
// The protocol's host contract (protocol/doc.go, H5) has a host fetch each
// input from the higher of its committed position and the node's
// ResumePositions. The stage fetches from the group's committed offset (or
// the log start, H6) and reports that start to the node with
// PositionAdvance. The stages of an application share the group's offsets,
// so a stage may have consumed less than the group's position: a stage
// added over a topic another stage already reads, a source added to a
// stage, a stage an instance of another version did not run. When a new
// task's ResumePositions (or, for an input it has never consumed, the log
// start) lie below the group's position, the step aborts and the client
// fetches from there (positions.go); the other stages drop the records
// they see again as replays (protocol.Node.OnRecord) without delivering
// them or folding their clocks. After a redeploy that added an input,
// carried ancestry seeds the new channel's frontier past the group's
// start; those records are fetched and dropped the same way. Reporting a
// start below the frontier changes nothing (PositionAdvance only moves
// forward). See docs/architecture.md.
//
// # Where a change goes
//
// The session loop is app.go (Run, the client loop, and the App: the parts
// it composes) and session.go (one client incarnation: its options, the
// poll loop and how far a step polls). Each part is a type in its own file
// that says who may touch it. Then, by concern:
//
//   - rebalancing: assignment.go (the assignment franz-go's callbacks
//     write on the client's goroutines and the loop reads, under its
//     lock), balancer.go (the co-partitioning plan and standby
//     placement), assign.go (which tasks may run with an assignment),
//     tasks.go (reconcile: opening and closing tasks), fence.go (a departed
//     owner's open transaction);
//   - transactions: step.go (one step's transaction), txnend.go (ending
//     it: all of franz-go's KIP-447 caveats on GroupTransactSession.End, the
//     empty step, the offset anchor, re-arming the revoke callback),
//     outcome.go (what the loop does after a step ends), positions.go;
//   - standbys: standby.go (the standby jobs' lifecycle and this member's
//     side of placement), standbywire.go (their wire format in the join's
//     and the assignment's user data), placement in balancer.go;
//   - tasks: taskset.go (the set of open tasks and what the loop asks of
//     it), task.go (a task and its step work), env.go (what a task may use
//     of the App), restore.go, holds.go, ticks.go, truncate.go;
//   - what other goroutines read: snapshot.go (the status and the
//     published snapshot), health.go, introspect.go, metrics.go.
//
// # Topics the application needs
//
// Every source, sink and changelog topic must exist before Run; Run checks
// them, and that a stage's sources (and its changelog) agree on the
// partition count, and refuses to start with a list of every problem.
package stage
