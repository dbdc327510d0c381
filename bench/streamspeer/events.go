package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// eventPrefix starts the lines a peer prints on standard output for the
// driver: "streamspeer-event NAME UNIX_NANOS [details...]".
const eventPrefix = "streamspeer-event "

// An event is one such line: restore-start, restore-end or ready, when the
// peer printed it, and the rest of the line's fields.
type event struct {
	name    string
	at      time.Time
	details []string
}

// errEventLine is a line with the event prefix that does not parse.
var errEventLine = errors.New("streamspeer: malformed event line")

func parseEvent(line string) (event, error) {
	rest, ok := strings.CutPrefix(line, eventPrefix)
	if !ok {
		return event{}, fmt.Errorf("%w: %q", errEventLine, line)
	}
	f := strings.Fields(rest)
	if len(f) < 2 {
		return event{}, fmt.Errorf("%w: %q", errEventLine, line)
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil || ns <= 0 {
		return event{}, fmt.Errorf("%w: time in %q", errEventLine, line)
	}
	return event{name: f[0], at: time.Unix(0, ns), details: f[2:]}, nil
}

// events is a peer's standard output: it keeps the event lines and passes
// every other line on to w. It is safe for the process's copying goroutine
// and the driver at once.
type events struct {
	mu      sync.Mutex
	w       io.Writer
	partial []byte
	got     []event
	bad     error
}

func newEvents(w io.Writer) *events { return &events{w: w} }

func (e *events) Write(p []byte) (int, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.partial = append(e.partial, p...)
	for {
		i := bytes.IndexByte(e.partial, '\n')
		if i < 0 {
			break
		}
		line := string(e.partial[:i])
		e.partial = e.partial[i+1:]
		if !strings.HasPrefix(line, eventPrefix) {
			// A failed write to the terminal must not stop the peer.
			_, _ = io.WriteString(e.w, line+"\n")
			continue
		}
		ev, err := parseEvent(line)
		if err != nil {
			e.bad = errors.Join(e.bad, err)
			continue
		}
		e.got = append(e.got, ev)
	}
	return len(p), nil
}

// all returns the events so far and any line that did not parse.
func (e *events) all() ([]event, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]event(nil), e.got...), e.bad
}

// first returns the first event called name.
func (e *events) first(name string) (event, bool) {
	evs, _ := e.all()
	for _, ev := range evs {
		if ev.name == name {
			return ev, true
		}
	}
	return event{}, false
}

// restoreSpan returns the first restore-start, the last restore-end and
// the records the restore-end lines report (the Kafka Streams peer gives
// the records restored per partition; the Parsley peer gives none).
func restoreSpan(evs []event) (start, end time.Time, records int64, ok bool) {
	for _, ev := range evs {
		switch ev.name {
		case "restore-start":
			if start.IsZero() {
				start = ev.at
			}
		case "restore-end":
			end = ev.at
			if len(ev.details) == 2 {
				if n, err := strconv.ParseInt(ev.details[1], 10, 64); err == nil {
					records += n
				}
			}
		}
	}
	return start, end, records, !start.IsZero() && !end.IsZero() && !end.Before(start)
}
