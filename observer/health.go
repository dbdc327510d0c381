package observer

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"
)

// Health is what an Observer knows about its own view of the cluster. An
// observer that cannot read the cluster says so here, in its metrics and
// in the web UI, rather than reporting a quiet, healthy log.
type Health struct {
	// Up reports that the last probe of the cluster (topic metadata and
	// end offsets) succeeded.
	Up bool `json:"up"`
	// Err says why the cluster could not be read, when !Up.
	Err string `json:"error,omitempty"`
	// Since is when Up last changed (or the observer started).
	Since time.Time `json:"since"`
	// Checked is when the cluster was last probed; zero before the first
	// probe ends.
	Checked time.Time `json:"checked"`
	// Topics are the observed topics, by name.
	Topics []string `json:"topics"`
	// Missing are configured topic names that do not exist (yet), and
	// the pattern when it matches nothing; the observer keeps looking.
	Missing []string `json:"missing,omitempty"`
	// LastFetch is, per observed topic, when the observer last fetched
	// its records or found it had read all of it.
	LastFetch map[string]time.Time `json:"last_fetch"`
	// Lag is, per observed topic, how many offsets the observer was
	// behind the log end at the last probe.
	Lag map[string]int64 `json:"lag"`
}

// healthState is an Observer's Health behind a lock of its own, so health
// readers never wait for an ingest.
type healthState struct {
	started time.Time
	mu      sync.Mutex
	h       Health
	// probeErr and groupErr are the last probe's and, for a shard, the
	// group's: the observer is up when neither failed.
	probeErr, groupErr error
	probed             bool
}

func newHealthState(now time.Time) *healthState {
	return &healthState{started: now, h: Health{Since: now, Err: "not yet connected", LastFetch: map[string]time.Time{}, Lag: map[string]int64{}}}
}

// get returns a copy.
func (s *healthState) get() Health {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.h
	h.Topics = slices.Clone(h.Topics)
	h.Missing = slices.Clone(h.Missing)
	h.LastFetch = maps.Clone(h.LastFetch)
	h.Lag = maps.Clone(h.Lag)
	return h
}

// set records a probe's outcome; err nil means the cluster was read. It
// reports whether Up changed.
func (s *healthState) set(now time.Time, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.probeErr, s.probed, s.h.Checked = err, true, now
	return s.update(now)
}

// setGroup records whether a shard takes part in its group (nil) or why
// not; a shard outside its group reads nothing. It reports whether the
// group's state changed.
func (s *healthState) setGroup(err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed := (err == nil) != (s.groupErr == nil)
	s.groupErr = err
	if s.probed {
		s.update(time.Now())
	}
	return changed
}

// update derives Up and Err; it reports whether Up changed.
func (s *healthState) update(now time.Time) bool {
	err := cmp.Or(s.probeErr, s.groupErr)
	up := err == nil
	changed := up != s.h.Up
	if changed {
		s.h.Since = now
	}
	s.h.Up, s.h.Err = up, ""
	if err != nil {
		s.h.Err = err.Error()
	}
	return changed
}

func (s *healthState) setTopics(topics, missing []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h.Topics, s.h.Missing = topics, missing
}

func (s *healthState) fetched(now time.Time, topic string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h.LastFetch[topic] = now
}

func (s *healthState) setLag(lag map[string]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h.Lag = lag
}
