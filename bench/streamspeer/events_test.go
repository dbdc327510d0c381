package main

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

func TestEventsSplitsEventLinesFromOutput(t *testing.T) {
	var out bytes.Buffer
	e := newEvents(&out)
	// Lines arrive in arbitrary pieces.
	for _, p := range []string{"log one\nstreamspeer-event rea", "dy 1700000000000000001\nstreamspeer-event restore-start 1700000000000000002 3 0 9\n", "log two\nstreamspeer-event restore-end 1700000000000000005 3 9\nstreamspeer-event bogus\ntail"} {
		if n, err := e.Write([]byte(p)); err != nil || n != len(p) {
			t.Fatalf("Write = %d, %v", n, err)
		}
	}
	if got, want := out.String(), "log one\nlog two\n"; got != want {
		t.Errorf("passed on %q, want %q", got, want)
	}
	evs, err := e.all()
	if !errors.Is(err, errEventLine) {
		t.Errorf("err %v, want errEventLine for the bogus line", err)
	}
	if len(evs) != 3 || evs[0].name != "ready" || evs[0].at != time.Unix(0, 1700000000000000001) {
		t.Fatalf("events %+v", evs)
	}
	start, end, n, ok := restoreSpan(evs)
	if !ok || start != time.Unix(0, 1700000000000000002) || end != time.Unix(0, 1700000000000000005) || n != 9 {
		t.Errorf("restoreSpan = %v %v %d %v", start, end, n, ok)
	}
	if ev, ok := e.first("ready"); !ok || ev.at != evs[0].at {
		t.Errorf("first ready = %+v %v", ev, ok)
	}
	if _, ok := e.first("restore-middle"); ok {
		t.Error("found an event never printed")
	}
}

func TestRestoreSpanOverPartitions(t *testing.T) {
	at := func(ns int64) time.Time { return time.Unix(0, ns) }
	evs := []event{
		{name: "restore-start", at: at(10), details: []string{"0", "0", "5"}},
		{name: "restore-start", at: at(12), details: []string{"1", "0", "7"}},
		{name: "restore-end", at: at(20), details: []string{"0", "5"}},
		{name: "ready", at: at(25)},
		{name: "restore-end", at: at(30), details: []string{"1", "7"}},
	}
	start, end, n, ok := restoreSpan(evs)
	if !ok || start != at(10) || end != at(30) || n != 12 {
		t.Errorf("restoreSpan = %v %v %d %v, want 10 30 12 true", start, end, n, ok)
	}
	if _, _, _, ok := restoreSpan(evs[:2]); ok {
		t.Error("a restore that never ended has a span")
	}
}
