package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"
)

// A sample is one output of a latency round: the input record's id, the
// send time its payload carries and the time the driver's read_committed
// consumer received it.
type sample struct {
	id            int64
	send, receipt time.Time
}

func (s sample) latency() time.Duration { return s.receipt.Sub(s.send) }

// Latency round phases: warm-up records are produced and read back before
// the measured ones, so neither peer's start is counted as latency.
const (
	phaseWarmup  = "warmup"
	phaseMeasure = "measure"
)

// latencyHeader is the first row of a -latency-dump file.
var latencyHeader = []string{"system", "round", "phase", "id", "send_unix_ns", "receipt_unix_ns", "latency_ms"}

// errLatencySample is returned for a sample the dump cannot represent.
var errLatencySample = errors.New("streamspeer: bad latency sample")

// latencyCSV writes one row per output of the latency rounds.
type latencyCSV struct{ w *csv.Writer }

// newLatencyCSV writes the header to w and returns the writer of the rows.
func newLatencyCSV(w io.Writer) (*latencyCSV, error) {
	l := &latencyCSV{csv.NewWriter(w)}
	if err := l.w.Write(latencyHeader); err != nil {
		return nil, fmt.Errorf("streamspeer: latency dump: %w", err)
	}
	return l, nil
}

// write adds the rows of one round's samples.
func (l *latencyCSV) write(system string, round int, phase string, ss []sample) error {
	for _, s := range ss {
		if s.send.IsZero() || s.receipt.IsZero() {
			return fmt.Errorf("%w: id %d has no send or receipt time", errLatencySample, s.id)
		}
		row := []string{
			system,
			strconv.Itoa(round),
			phase,
			strconv.FormatInt(s.id, 10),
			strconv.FormatInt(s.send.UnixNano(), 10),
			strconv.FormatInt(s.receipt.UnixNano(), 10),
			strconv.FormatFloat(float64(s.latency())/float64(time.Millisecond), 'f', 3, 64),
		}
		if err := l.w.Write(row); err != nil {
			return fmt.Errorf("streamspeer: latency dump: %w", err)
		}
	}
	return nil
}

// flush writes out what is buffered and reports any write error.
func (l *latencyCSV) flush() error {
	l.w.Flush()
	if err := l.w.Error(); err != nil {
		return fmt.Errorf("streamspeer: latency dump: %w", err)
	}
	return nil
}

func latencies(ss []sample) []time.Duration {
	ds := make([]time.Duration, len(ss))
	for i, s := range ss {
		ds[i] = s.latency()
	}
	return ds
}
