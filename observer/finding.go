package observer

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Code names a kind of finding. Codes are stable: route alerts and CI
// gates by them.
type Code string

// The finding codes. docs/observer.md explains each and what to do.
const (
	// CodeSequenceGap: a sender's send sequence on a channel skipped
	// numbers between two consecutive records.
	CodeSequenceGap Code = "sequence-gap"
	// CodeStampRegression: a sender's later stamp to a channel claims less
	// on some channel than its earlier one did, or its send sequence went
	// back — it lost ordering state.
	CodeStampRegression Code = "stamp-regression"
	// CodeUnsettleableClaim: an offset claim names a transaction marker, an
	// aborted (skipped) record, or an offset at or past the log end.
	CodeUnsettleableClaim Code = "unsettleable-claim"
	// CodePartiallyStamped: some records of a topic carry stamps and others
	// do not.
	CodePartiallyStamped Code = "partially-stamped-topic"
	// CodeUndecodableStamp: a record's stamp headers are present but
	// malformed; every Parsley consumer of it fails closed.
	CodeUndecodableStamp Code = "undecodable-stamp"
	// CodeLateJoinerWindow: a sequence claim still circulates whose sender
	// has no record at or above where a consumer joining now would start.
	CodeLateJoinerWindow Code = "late-joiner-window"
	// CodeStampGrowth: entries and header bytes per record rise over time
	// on a topic.
	CodeStampGrowth Code = "stamp-growth"
)

// AllCodes returns every finding code, in the order the documentation
// gives them.
func AllCodes() []Code {
	return []Code{
		CodeSequenceGap, CodeStampRegression, CodeUnsettleableClaim, CodePartiallyStamped,
		CodeUndecodableStamp, CodeLateJoinerWindow, CodeStampGrowth, CodeCrossPartitionCause,
	}
}

// rank orders codes as AllCodes does.
func (c Code) rank() int { return slices.Index(AllCodes(), c) }

// Severity ranks findings. A scan fails at or above a chosen severity.
type Severity int

// Severities, lowest first.
const (
	SeverityInfo Severity = iota + 1
	SeverityWarning
	SeverityError
)

// ErrBadSeverity is wrapped when a severity name is not info, warning or
// error.
var ErrBadSeverity = errors.New("unknown severity")

func (s Severity) String() string {
	switch s {
	case SeverityInfo:
		return "info"
	case SeverityWarning:
		return "warning"
	case SeverityError:
		return "error"
	}
	return fmt.Sprintf("Severity(%d)", int(s))
}

// MarshalText writes the severity's name.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText reads a severity's name.
func (s *Severity) UnmarshalText(b []byte) error {
	v, err := ParseSeverity(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// ParseSeverity parses "info", "warning" or "error".
func ParseSeverity(s string) (Severity, error) {
	switch strings.ToLower(s) {
	case "info":
		return SeverityInfo, nil
	case "warning", "warn":
		return SeverityWarning, nil
	case "error":
		return SeverityError, nil
	}
	return 0, fmt.Errorf("observer: severity %q (want info, warning or error): %w", s, ErrBadSeverity)
}

// Finding is one thing wrong with the observed stamps.
type Finding struct {
	// ID numbers the stored finding: what an acknowledgement names. 0 for
	// a finding evaluated from a read-only store and not yet recorded.
	ID int64 `json:"id"`
	// Key is what the finding is about, stable across evaluations: a
	// later evaluation finding the same thing updates this finding.
	Key      string   `json:"key"`
	Code     Code     `json:"code"`
	Severity Severity `json:"severity"`
	// Topic is the topic name the finding is about, when it is about one.
	Topic string `json:"topic,omitempty"`
	// Coordinates are the records (or claimed positions) involved, as
	// "topicID/partition@offset", the record the finding is about first.
	Coordinates []string `json:"coordinates"`
	// Names are Coordinates with topics by name, as people read them
	// (see Names).
	Names   []string `json:"names"`
	Summary string   `json:"summary"`
	Action  string   `json:"action"`
	// SafeJoin, for a late-joiner window, is the offset per channel
	// ("topicID/partition") at or below which a new consumer must start to
	// deliver the claimed record.
	SafeJoin map[string]int64 `json:"safe_join,omitempty"`
	// Count is how many times the same finding was seen.
	Count int `json:"count"`
	// State is open, acknowledged or resolved (see lifecycle.go).
	State State `json:"state"`
	// FirstSeen and LastSeen are when evaluations first and last found it.
	FirstSeen time.Time `json:"first_seen"`
	LastSeen  time.Time `json:"last_seen"`
	// Ack, when set, is who acknowledged it and why.
	Ack *Ack `json:"acknowledged,omitempty"`
	// Resolved, when set, is when and why its condition stopped holding.
	Resolved *Resolution `json:"resolved,omitempty"`

	// anchor is the channel whose owner records the finding (partials.go);
	// "" for one recorded before schema 4, which its store's observer
	// keeps.
	anchor string
}

// Open reports whether f counts towards alerts: its condition holds and
// nobody acknowledged it.
func (f Finding) Open() bool { return f.State == StateOpen }

// String is a one-line rendering for terminals and logs, by name where
// names are known.
func (f Finding) String() string {
	coords := f.Names
	if len(coords) != len(f.Coordinates) {
		coords = f.Coordinates
	}
	return fmt.Sprintf("%s %s: %s [%s] — %s", f.Severity, f.Code, f.Summary, strings.Join(coords, " "), f.Action)
}

// Explain returns what a code means and its severity.
func (c Code) Explain() string { return codeInfo[c].meaning }

// Action returns what to do about a finding of code c.
func (c Code) Action() string { return codeInfo[c].action }

// Severity returns the severity findings of code c carry.
func (c Code) Severity() Severity { return codeInfo[c].severity }

var codeInfo = map[Code]struct {
	severity        Severity
	meaning, action string
}{
	CodeSequenceGap: {SeverityError,
		"a sender's send sequence on a channel skipped numbers: records it sent are missing from the log",
		"find why the sender's sends were lost (a producer that does not wait for acknowledgements, or sequence state restored from a stale store); consumers release claims on the missing numbers only when a later record of that sender arrives"},
	CodeStampRegression: {SeverityError,
		"a sender's later stamp claims less than its earlier one, or its sequence went back: the sender lost ordering state",
		"restore the sender's state store (changelog) instead of starting it empty; until then its records can be delivered before their causes"},
	CodeUnsettleableClaim: {SeverityError,
		"an offset claim names no committed record: a transaction marker, an aborted record, or an offset at or past the log end",
		"fix the writer to claim only offsets of acknowledged, committed records (never the log-end offset); consumers hold the claiming record until a later record on that channel settles it"},
	CodePartiallyStamped: {SeverityWarning,
		"some records of the topic carry stamps and others do not; the unstamped ones claim nothing and deliver at once",
		"stamp every producer of the topic, or none; find the unstamped producer from the listed records"},
	CodeUndecodableStamp: {SeverityError,
		"a record carries stamp headers that do not decode; every Parsley consumer fails closed on it",
		"fix or upgrade the writer; the record must be re-sent with a valid stamp (decode it with `parsley-observe decode --coord`)"},
	CodeLateJoinerWindow: {SeverityWarning,
		"a sequence claim still circulates whose sender has no record at or above where a consumer joining now would start: a late joiner would hold forever",
		"start new consumers at or below the safe join offset (the last stable offset is not enough here), or have a consuming stage normalise the claim to an offset"},
	CodeStampGrowth: {SeverityWarning,
		"stamp entries and header bytes per record keep rising on the topic",
		"check for a topology that keeps adding channels to its clocks (a fan-in over ever more partitions, or deleted topics never truncated); rescope or truncate"},
	CodeCrossPartitionCause: {SeverityWarning, // placement.go
		"a record that is not on the partition murmur2 of its key gives claims a cause on another partition of a topic with as many partitions: " +
			"a stage reading both topics consumes the two in different tasks and does not order them",
		"make every producer of the topic partition with murmur2, Kafka's default (sarama: sarama.NewMurmur2Partitioner; " +
			"librdkafka: partitioner=murmur2_random; kafka-go: Murmur2Balancer), or key related records alike so they share a partition number"},
}

// Known reports whether c is one of the codes AllCodes returns.
func (c Code) Known() bool { return codeInfo[c].action != "" }
