// Package failover is the broker-failover soak: a stamped producer and a
// stateful settlement stage on three instances run against a three-broker
// Kafka cluster (replication factor 3, min.insync.replicas 2) while the
// soak SIGKILLs, in turn, the leader of a source partition, the broker
// coordinating a stage transaction and the broker coordinating the stage's
// group, restarting each, then (Options.Rolling) restarts every broker in
// turn with SIGTERM, a controlled shutdown. For each fault it records when
// the surviving brokers first answered with the new leader or coordinator,
// when every source partition and every output partition had new
// committed records, so the clients' share of a stall is measured, not
// estimated. Check, the oracle, then reads the topics and reports every
// lost, duplicated, aborted, out-of-causal-order or wrongly counted
// settlement.
//
// cmd/failover-soak runs it; docs/performance.md records its figures.
package failover
