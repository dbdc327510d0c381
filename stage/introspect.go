package stage

import (
	"cmp"
	"errors"
	"slices"
	"strings"
)

// Read-only views for tooling (stagetest's probes, deploy checks): what an
// application declares, without running it.

// ApplicationID returns the application's ID.
func (a *App) ApplicationID() string { return a.cfg.ApplicationID }

// Stages returns the application's stages in declaration order.
func (a *App) Stages() []*Stage { return append([]*Stage(nil), a.stages...) }

// SinkTopics returns the stage's declared sinks in declaration order, as
// typed topics: each is a *Topic[K, V], whose CheckRecord decodes a record
// with its codecs. Sinks returns the same sinks' names, in the same order,
// for tooling that needs only names (as Sources does for the sources).
func (s *Stage) SinkTopics() []Sink { return append([]Sink(nil), s.sinks...) }

// CheckRecord decodes a fetched record's key and value with t's codecs, as
// the next hop's consumer will, and checks the key codec is canonical on
// it: re-encoding the decoded key gives the same bytes. A nil key or value
// is not decoded. The error names the topic and the part that failed.
func (t *Topic[K, V]) CheckRecord(key, value []byte) (err error) {
	defer catch(&err)
	if key != nil {
		k, err := t.key.Decode(key)
		if err != nil {
			return &CodecError{Topic: t.name, Part: "key", Op: "decode", Err: err}
		}
		again, err := t.key.Encode(k)
		if err != nil {
			return &CodecError{Topic: t.name, Part: "key", Op: "encode", Err: err}
		}
		if string(again) != string(key) {
			return &CodecError{Topic: t.name, Part: "key", Op: "re-encode", Err: errNotCanonical}
		}
	}
	if value != nil {
		if _, err := t.value.Decode(value); err != nil {
			return &CodecError{Topic: t.name, Part: "value", Op: "decode", Err: err}
		}
	}
	return nil
}

// errNotCanonical: decoding a key and encoding it again gave other bytes.
var errNotCanonical = errors.New("decoding and re-encoding the key gives different bytes; the key codec is not canonical")

// TaskInfo describes a task this instance runs.
type TaskInfo struct {
	Stage     string
	Partition int32
	Held      int // records waiting at the gate (0 while the task rebuilds)
	// Restoring: the task's store is being restored from its changelog,
	// off the step path; it joins the steps when the restore ends. The
	// instance's other tasks go on processing meanwhile.
	Restoring bool
	// Standby: this instance does not run the task but keeps a warm copy
	// of its store by tailing its changelog (Config.Standbys); Held is 0.
	// Lag is how many changelog offsets the copy trails by, as of its last
	// poll, and -1 until it first caught up.
	Standby bool
	Lag     int64
}

// Tasks returns the tasks this instance runs, and those it keeps standby
// copies of, sorted by stage name and partition (an instance never has
// both for one task). Like ExplainHolds it reads the snapshot published
// after every step and idle poll, so it never waits for a step.
func (a *App) Tasks() []TaskInfo {
	snap := a.status.snap.Load()
	if snap == nil {
		return nil
	}
	var out []TaskInfo
	for _, t := range snap.tasks {
		ti := TaskInfo{Stage: t.stage, Partition: t.partition, Restoring: t.restoring}
		if !t.rebuilding {
			ti.Held = t.held
		}
		out = append(out, ti)
	}
	for _, s := range snap.standbys {
		out = append(out, TaskInfo{Stage: s.stage, Partition: s.partition, Standby: true, Lag: s.lag})
	}
	slices.SortFunc(out, func(x, y TaskInfo) int {
		return cmp.Or(strings.Compare(x.Stage, y.Stage), cmp.Compare(x.Partition, y.Partition))
	})
	return out
}
