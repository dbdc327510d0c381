package stage

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkRestoreCurve restores changelogs of 1,000,000, 3,000,000 and
// 10,000,000 keys into empty stores (benchRestore) and reports, besides
// the time, how much the process's resident set rose at its peak during
// the restore over what it was before: the restore's own memory, which the
// store's cache setting bounds, apart from the in-process broker's copy of
// the log. It runs minutes and needs several GiB for the broker's copy of
// the largest log, so it is skipped unless PARSLEY_RESTORE is set;
// PARSLEY_RESTORE_KEYS (comma-separated) replaces the points:
//
//	PARSLEY_RESTORE=1 go test ./stage -run '^$' -bench RestoreCurve -benchtime 1x -count 1 -timeout 1h
func BenchmarkRestoreCurve(b *testing.B) {
	if os.Getenv("PARSLEY_RESTORE") == "" {
		b.Skip("long: set PARSLEY_RESTORE=1 (docs/performance.md, How cost grows)")
	}
	points := []int{1_000_000, 3_000_000, 10_000_000}
	if s := os.Getenv("PARSLEY_RESTORE_KEYS"); s != "" {
		points = points[:0]
		for f := range strings.SplitSeq(s, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("PARSLEY_RESTORE_KEYS=%q: want positive integers separated by commas", s)
			}
			points = append(points, n)
		}
	}
	for _, k := range points {
		b.Run(fmt.Sprintf("restore=%d", k), func(b *testing.B) { benchRestore(b, k) })
	}
}

// resetPeakResident makes the kernel's record of the process's peak
// resident set (VmHWM) start again from the current one (Linux 4.0 and
// later: /proc/self/clear_refs). It skips the benchmark where it cannot.
func resetPeakResident(b *testing.B) {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Skipf("peak resident memory cannot be reset here: %v", err)
	}
}

// peakResident is the process's peak resident set since the last
// resetPeakResident (/proc/self/status, VmHWM).
func peakResident(b *testing.B) int64 {
	s, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Skipf("peak resident memory unknown here: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(s))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			var kib int64
			if _, err := fmt.Sscan(v, &kib); err != nil {
				b.Fatalf("VmHWM %q: %v", v, err)
			}
			return kib << 10
		}
	}
	b.Skip("peak resident memory unknown here: no VmHWM")
	return 0
}
