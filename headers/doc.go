// Package headers is Parsley's wire vocabulary: topic and sender IDs,
// channels, dependency clocks, and the two header dialects that carry a
// clock on a Kafka record.
//
// A Clock holds two kinds of claim. An offset entry (channel → watermark)
// claims every record at or below the watermark on that channel. A sequence
// entry ((channel, sender) → watermark) claims every record the sender sent
// to that channel with a send sequence at or below the watermark; a stamping
// node uses it for its own recent sends, whose offsets it does not know yet.
//
// # The vc dialect
//
// Three headers, byte for byte as the Java library 0.2 writes them:
//
//	vc         byte version (1)
//	           int32 offsetEntryCount, then per entry:
//	             16-byte topic ID, int32 partition, int64 offset
//	           int32 seqEntryCount, then per entry:
//	             16-byte topic ID, int32 partition, 16-byte sender ID, int64 seq
//	vc-sender  16-byte sender ID
//	vc-seq     int64 send sequence of this record on its channel
//
// All integers are big-endian and both sections are sorted, so equal clocks
// are byte-identical. vc-sender and vc-seq appear together or not at all.
// Stages write this dialect, because only it carries sequence claims and the
// sender tag that lets receivers resolve them.
//
// # The causes dialect
//
// One header, parsley.causes, version 1: offset entries grouped by topic,
// structural fields as minimal unsigned varints, positions as int64:
//
//	value := 0x01 varint(topicCount) group*
//	group := topicID(16) varint(partitionCount ≥ 1) (varint(partition) int64(position))*
//
// Topic IDs and partitions ascend strictly, so one cause set has exactly one
// encoding. A topic's first partition costs 26 bytes, each further one 9
// (for partitions below 128), plus a 2-byte preamble. Plain producers may
// write this dialect (it is compact and simple for non-Go tooling to emit);
// every reader in Parsley reads both.
//
// # Reading and writing a record's stamp
//
// ReadStamp reads either dialect, or both (their union), from any header
// slice shaped like Header — kgo.RecordHeader included. Decoding fails
// closed: a malformed, duplicated or half-present stamp is an error wrapping
// ErrUndecodable and is never read as absent. AppendStamp writes a stamp
// after the application's headers and refuses application headers whose
// names are reserved (ErrReservedHeader).
//
// The decoders never panic, are fuzzed, and accept exactly the inputs the
// encoders produce: every accepted value re-encodes to the same bytes.
package headers
