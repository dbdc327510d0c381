package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkScale/partitions=4-2    1  2073361056 ns/op  0.62 cpu-ratio  238759 plain-rec/s  0.43 ratio  102261 stage-rec/s
BenchmarkScale/partitions=4-2    1  2073361056 ns/op  0.70 cpu-ratio  200000 plain-rec/s  0.50 ratio  100000 stage-rec/s
BenchmarkScale/partitions=4-2    1  2073361056 ns/op  0.66 cpu-ratio  210000 plain-rec/s  0.90 ratio  110000 stage-rec/s
BenchmarkScale/restore=10000-2   1  41547941 ns/op  0.0138 restore-s  722878 restore-rec/s
BenchmarkScale/restore=10000-2   1  41547941 ns/op  0.0120 restore-s  822878 restore-rec/s
BenchmarkOther-2                 1  1 ns/op
PASS
`

func TestParseBestAndMedian(t *testing.T) {
	res, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	p := res[point{"partitions", 4}]
	if got := p["cpu-ratio"]; len(got) != 3 {
		t.Fatalf("cpu-ratio runs %v, want 3", got)
	}
	if b, m := best("cpu-ratio", p["cpu-ratio"]), median(p["cpu-ratio"]); b != 0.70 || m != 0.66 {
		t.Fatalf("cpu-ratio best %v median %v, want 0.70 and 0.66", b, m)
	}
	r := res[point{"restore", 10000}]
	if b := best("restore-s", r["restore-s"]); b != 0.0120 {
		t.Fatalf("restore-s best %v, want the lower 0.0120", b)
	}
	if len(res) != 2 {
		t.Fatalf("%d points, want 2 (other benchmarks ignored)", len(res))
	}
}

func TestRunWritesPlotsAndTable(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "results.txt")
	if err := os.WriteFile(in, []byte(sample), 0o644); err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	if err := run(in, dir, "svg", &table); err != nil {
		t.Fatal(err)
	}
	if err := run(in, dir, "png", io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"partitions.svg", "restore.svg", "partitions.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if !strings.Contains(table.String(), "| 4 | 110000 (102261) |") {
		t.Fatalf("table lacks the best (median) stage rate:\n%s", table.String())
	}
}

func TestParseRejectsBrokenMetrics(t *testing.T) {
	if _, err := parse(strings.NewReader("BenchmarkScale/width=8-2 1 5 ns/op 0.5\n")); err == nil {
		t.Fatal("a value without a unit was accepted")
	}
}
