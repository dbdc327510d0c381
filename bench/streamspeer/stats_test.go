package main

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     time.Duration
		err      bool
	}{
		{"plain", "42 (java) S 1 42 42 0 -1 4194304 100 0 0 0 250 50 0 0 20 0 30 0 100 1000 10", 3 * time.Second, false},
		{"name with spaces and parens", "7 (a) b (c) R 1 7 7 0 -1 0 0 0 0 0 1 2 0 0", 30 * time.Millisecond, false},
		{"no name", "42 java S 1", 0, true},
		{"short", "42 (java) S 1 2", 0, true},
		{"not a number", "42 (java) S 1 42 42 0 -1 4194304 100 0 0 0 x 50", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatCPU([]byte(tc.in))
			if tc.err {
				if !errors.Is(err, errProcFormat) {
					t.Fatalf("err %v, want errProcFormat", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestParseStatPPID(t *testing.T) {
	got, err := parseStatPPID([]byte("99 (kafka (x)) S 1234 99 99"))
	if err != nil || got != 1234 {
		t.Fatalf("got %d, %v; want 1234", got, err)
	}
	if _, err := parseStatPPID([]byte("99 (k) S x")); !errors.Is(err, errProcFormat) {
		t.Fatalf("err %v, want errProcFormat", err)
	}
}

func TestParseVmHWM(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     int64
		err      bool
	}{
		{"found", "Name:\tjava\nVmPeak:\t 9 kB\nVmHWM:\t  2048 kB\nVmRSS:\t 1 kB\n", 2048 << 10, false},
		{"missing", "Name:\tjava\nVmRSS:\t 1 kB\n", 0, true},
		{"bad unit", "VmHWM:\t 2 MB\n", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseVmHWM([]byte(tc.in))
			if tc.err {
				if !errors.Is(err, errProcFormat) {
					t.Fatalf("err %v, want errProcFormat", err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{7}, 7},
	} {
		if got := median(tc.in); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median(nil) is not NaN")
	}
}

func TestPercentile(t *testing.T) {
	ds := make([]time.Duration, 100)
	for i := range ds {
		ds[99-i] = time.Duration(i+1) * time.Millisecond // 100..1, unsorted
	}
	for _, tc := range []struct {
		p    float64
		want time.Duration
	}{
		{50, 50 * time.Millisecond},
		{99, 99 * time.Millisecond},
		{100, 100 * time.Millisecond},
		{0.1, time.Millisecond},
	} {
		if got := percentile(ds, tc.p); got != tc.want {
			t.Errorf("p%v = %v, want %v", tc.p, got, tc.want)
		}
	}
	if percentile(nil, 50) != 0 {
		t.Error("percentile of none is not 0")
	}
}
