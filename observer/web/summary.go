package web

import (
	"context"
	"strconv"
	"time"

	"github.com/parsley-go/parsley/observer"
)

// docsURL is where each finding code is explained, one anchor per code.
const docsURL = "https://github.com/parsley-go/parsley/blob/main/docs/observer.md#"

// severityCount is how many open findings of one severity a code has.
type severityCount struct {
	Severity observer.Severity
	N        int
}

// codeCount is one row of the findings page's summary: a code's open
// findings by their own severities (a code's findings can differ: a claim
// on a marker is info, past the log end an error), how many are
// acknowledged and resolved, how many times they were seen, and when the
// records the open and acknowledged ones name were written, first and
// last.
type codeCount struct {
	Code                   observer.Code
	Meaning                string
	Open                   []severityCount // highest severity first, none with N = 0
	OpenTotal              int
	Acknowledged, Resolved int
	Seen                   int
	First, Last            time.Time
}

// severitiesDown are the severities, highest first.
var severitiesDown = []observer.Severity{observer.SeverityError, observer.SeverityWarning, observer.SeverityInfo}

// codeSummary counts findings per code, in AllCodes order, with a row for
// every code so a clean code reads as a zero.
func (s *Server) codeSummary(ctx context.Context, fs []observer.Finding) []codeCount {
	rows := make([]codeCount, 0, len(observer.AllCodes()))
	at := map[observer.Code]int{}
	open := map[observer.Code]map[observer.Severity]int{}
	for _, c := range observer.AllCodes() {
		at[c] = len(rows)
		rows = append(rows, codeCount{Code: c, Meaning: c.Explain()})
		open[c] = map[observer.Severity]int{}
	}
	for _, f := range fs {
		i, ok := at[f.Code]
		if !ok {
			continue
		}
		row := &rows[i]
		switch f.State {
		case observer.StateOpen:
			open[f.Code][f.Severity]++
			row.OpenTotal++
		case observer.StateAcknowledged:
			row.Acknowledged++
		case observer.StateResolved:
			row.Resolved++
			continue // its records say nothing about what holds now
		}
		row.Seen += f.Count
		for _, c := range f.Coordinates {
			ref, err := observer.ParseRef(c)
			if err != nil || !ref.ByID {
				continue // a sequence claim, not a record
			}
			t, ok := s.store.RecordTime(ctx, ref)
			if !ok {
				continue
			}
			if row.First.IsZero() || t.Before(row.First) {
				row.First = t
			}
			if t.After(row.Last) {
				row.Last = t
			}
		}
	}
	for i := range rows {
		for _, sev := range severitiesDown {
			if n := open[rows[i].Code][sev]; n > 0 {
				rows[i].Open = append(rows[i].Open, severityCount{sev, n})
			}
		}
	}
	return rows
}

// lagOf renders a topic's lag from the observer's health; "" when the
// store is served without an observer.
func lagOf(health any, topic string) string {
	h, ok := health.(observer.Health)
	if !ok {
		return ""
	}
	n, ok := h.Lag[topic]
	if !ok {
		return "—"
	}
	return strconv.FormatInt(n, 10)
}

// lastRead renders when the observer last read a topic.
func lastRead(health any, topic string) string {
	h, ok := health.(observer.Health)
	if !ok {
		return ""
	}
	t, ok := h.LastFetch[topic]
	if !ok {
		return "never"
	}
	return t.UTC().Format("15:04:05 UTC")
}
