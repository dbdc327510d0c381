// Package clock gives a plain franz-go producer the causal stamps a Parsley
// stage writes, with nothing but franz-go beside it.
//
// Topologies begin and end at plain producers and consumers. A Clock is a
// running view of one producer's causal past: fold what you consumed
// (Observe), fold your own acknowledged sends (RecordProduced, or a
// Promise), and stamp each outgoing record (Stamp). A receiving stage then
// delivers the record only after everything it claims.
//
//	clk := clock.New(admin)
//	for _, in := range consumed {
//		handle(in)
//		if err := clk.Observe(in); err != nil { ... } // its coordinate and its carried clock
//	}
//	out := &kgo.Record{Topic: "orders", Value: v}
//	if err := clk.Stamp(ctx, out); err != nil { ... }
//	res := client.ProduceSync(ctx, out)            // sequential: wait for the ack
//	if err := res.FirstErr(); err == nil {
//		err = clk.RecordProduced(res[0].Record) // the next send claims this one
//	}
//
// The sequential pattern — send, await the acknowledgement, fold it — is
// what orders a producer's own sends across topics and partitions. A
// producer that pipelines sends without folding acknowledgements still
// writes valid stamps; it does not claim its own in-flight records, so their
// mutual order is not asserted. A producer that stamps nothing claims
// nothing, and its records deliver immediately everywhere: stamp the
// producers whose order matters, one at a time.
//
// A clock is one thread of causality. A transactional producer stamps and
// folds through a transaction's view of it (Begin, or BeginTransaction for
// a franz-go client): the transaction's stamps claim the shared clock and
// its own sends; when it commits its sends become the shared clock's, and
// when it aborts they are dropped, so no stamp claims an aborted record.
// While it holds sends, a stamp through the shared clock is refused with an
// *OpenTxnError instead of going out without them: a plain send that
// follows a transactional one goes within the transaction or after it.
//
// Plain consumers need nothing. ReadSender and ReadRecordStamp read a
// record's metadata for observability.
//
// Channels are named by topic ID, not name, so a topic deleted and
// recreated under the same name is a different channel. A Resolver maps
// names to IDs through the admin API and caches the answers; claims folded
// on one incarnation keep naming it.
//
// Other Kafka client libraries need no franz-go client: TopicIDs
// plugs their admin API into the resolver (a TopicIDLookup), and
// Clock.StampHeader, Clock.ObserveSeq and ReadStampSeq take headers of any
// shape as key/value pairs (iter.Seq2[string, []byte]). AppendStamp and
// ObserveHeaders serve header types shaped like headers.Header, and
// Clock.Produced folds a send by topic name, partition and offset. The
// adapters for sarama, kafka-go and confluent-kafka-go (adapters/ in this
// repository, each its own module) are built on these.
package clock
