package main

import (
	"bytes"
	"encoding/csv"
	"errors"
	"slices"
	"testing"
	"time"
)

func TestLatencyCSV(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 123_456_789)
	var buf bytes.Buffer
	l, err := newLatencyCSV(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.write("parsley", 2, phaseWarmup, []sample{{id: 0, send: t0, receipt: t0.Add(1500 * time.Millisecond)}}); err != nil {
		t.Fatal(err)
	}
	if err := l.write("streams", 3, phaseMeasure, []sample{
		{id: 7, send: t0, receipt: t0.Add(12345678 * time.Nanosecond)},
		{id: 8, send: t0.Add(time.Millisecond), receipt: t0.Add(time.Millisecond + 250*time.Microsecond)},
	}); err != nil {
		t.Fatal(err)
	}
	if err := l.flush(); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&buf).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{
		latencyHeader,
		{"parsley", "2", "warmup", "0", "1700000000123456789", "1700000001623456789", "1500.000"},
		{"streams", "3", "measure", "7", "1700000000123456789", "1700000000135802467", "12.346"},
		{"streams", "3", "measure", "8", "1700000000124456789", "1700000000124706789", "0.250"},
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d:\n%q", len(rows), len(want), rows)
	}
	for i := range want {
		if !slices.Equal(rows[i], want[i]) {
			t.Errorf("row %d = %q, want %q", i, rows[i], want[i])
		}
	}
}

func TestLatencyCSVRefusesMissingTimes(t *testing.T) {
	l, err := newLatencyCSV(&bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	err = l.write("parsley", 1, phaseMeasure, []sample{{id: 3, send: time.Unix(1, 0)}})
	if !errors.Is(err, errLatencySample) {
		t.Fatalf("err %v, want errLatencySample", err)
	}
}

type failWriter struct{}

var errDiskFull = errors.New("disk full")

func (failWriter) Write([]byte) (int, error) { return 0, errDiskFull }

func TestLatencyCSVReportsWriteErrors(t *testing.T) {
	l, err := newLatencyCSV(failWriter{})
	if err != nil {
		t.Fatal(err) // csv buffers: the header is not written yet
	}
	if err := l.flush(); !errors.Is(err, errDiskFull) {
		t.Fatalf("flush err %v, want errDiskFull", err)
	}
}
