package web

import (
	"context"
	"strconv"
	"time"

	"github.com/parsley-go/parsley/observer"
)

// docsURL is where each finding code is explained, one anchor per code.
const docsURL = "https://github.com/parsley-go/parsley/blob/main/docs/observer.md#"

// codeCount is one row of the findings page's summary: how many findings
// a code has, how many times they were seen, and when the records they
// name were written, first and last.
type codeCount struct {
	Code        observer.Code
	Severity    observer.Severity
	Meaning     string
	Findings    int
	Seen        int
	First, Last time.Time
}

// codeSummary counts findings per code, in AllCodes order, with a row for
// every code so a clean code reads as a zero.
func (s *Server) codeSummary(ctx context.Context, fs []observer.Finding) []codeCount {
	rows := make([]codeCount, 0, len(observer.AllCodes()))
	at := map[observer.Code]int{}
	for _, c := range observer.AllCodes() {
		at[c] = len(rows)
		rows = append(rows, codeCount{Code: c, Severity: c.Severity(), Meaning: c.Explain()})
	}
	for _, f := range fs {
		i, ok := at[f.Code]
		if !ok {
			continue
		}
		row := &rows[i]
		row.Findings++
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
