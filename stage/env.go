package stage

// What a task uses of its application: a narrow, read-only environment, so
// a task never reaches back into the App.

import (
	"log/slog"
	"sync"
	"time"

	"github.com/parsley-go/parsley/headers"
	"github.com/twmb/franz-go/pkg/kgo"
)

// taskEnv is shared by every task of the application. It is built once the
// startup checks have resolved the topics, and none of it changes while
// tasks run; sent is the only part written, and it locks.
type taskEnv struct {
	appID            string
	clock            func() time.Time // Config.WallClock
	truncateEvery    time.Duration    // Config.TruncateInterval
	holdWarningAfter time.Duration    // Config.HoldWarningAfter
	log              *slog.Logger

	topics  map[string]topicMeta       // every resolved topic by name
	names   map[headers.TopicID]string // and by ID
	offsets brokerOffsets              // for protocol.New and the sweep
	sent    *sendResults               // where the step's produce promises report
	scope   *scopeWarnings             // cross-task claims, counted per step (scope.go)
	tracing *tracing                   // nil: off (tracing.go)
}

// sendResults collects what the open step's asynchronous produces report:
// the first failure, and each task's changelog high-water mark. franz-go
// calls the promises on its own goroutines.
type sendResults struct {
	mu  sync.Mutex
	err error

	// produced counts the records the open step handed the producer. Only
	// the step goroutine touches it: it is counted where a record is
	// produced, not in the promises.
	produced int
}

// reset forgets the previous step's failure and count; a step calls it at
// Begin.
func (s *sendResults) reset() {
	s.mu.Lock()
	s.err = nil
	s.mu.Unlock()
	s.produced = 0
}

// promise is the produce promise of every record a step sends.
func (s *sendResults) promise(_ *kgo.Record, err error) {
	if err != nil {
		s.mu.Lock()
		if s.err == nil {
			s.err = err
		}
		s.mu.Unlock()
	}
}

// firstErr returns the first produce failure since reset.
func (s *sendResults) firstErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// raise sets *next to at least to, under the lock the promises share.
func (s *sendResults) raise(next *int64, to int64) {
	s.mu.Lock()
	*next = max(*next, to)
	s.mu.Unlock()
}

// load reads *next under the lock the promises share.
func (s *sendResults) load(next *int64) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return *next
}
