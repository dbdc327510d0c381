// Package observer rebuilds the causal graph of Kafka topics from the
// stamps their records carry, and says what is wrong with it.
//
// Causal holds are invisible to ordinary lag monitoring, and a broken stamp
// is invisible until data is wrong. An Observer tails a set of topics
// read-only (read_committed, transaction markers kept), decodes both stamp
// dialects (vc and parsley.causes), and stores every record's coordinate,
// sender tag and claims in SQLite. From that store it answers what a record
// depended on (Ancestry), what it caused (Descendants), and which stamps
// will make consumers hold or wedge (Findings).
//
// Each Finding has a stable Code, a Severity, the coordinates involved, an
// explanation and the action to take. Findings about a single record (a
// sequence gap, a stamp regression, an undecodable stamp) are detected as
// records arrive and kept even after the records themselves are pruned;
// findings about the state of the log (unsettleable claims, partially
// stamped topics, late-joiner windows, stamp growth) are derived from the
// store and the brokers' current offsets each time they are asked for.
//
// The observer never writes to the topics it observes: it issues no
// produce, commit or delete requests.
package observer
