package sim

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
)

func seeds(t testing.TB, def int) int {
	if s := os.Getenv("PARSLEY_SIM_SEEDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("PARSLEY_SIM_SEEDS=%q: want a positive integer", s)
		}
		return n
	}
	return def
}

func replay(sc string, seed uint64) string {
	return fmt.Sprintf("replay: PARSLEY_SIM_REPLAY=%s:%d go test ./sim -run TestReplay -v", sc, seed)
}

func TestSmoke(t *testing.T) {
	for _, sc := range Scenarios() {
		for seed := uint64(1); seed <= 20; seed++ {
			r := RunScenario(context.Background(), sc, seed, Options{})
			if r.Failed() {
				t.Errorf("%s seed %d: %v\n%s", sc.Name, seed, r.Violations[0], replay(sc.Name, seed))
			}
			t.Logf("%s seed %d: %+v", sc.Name, seed, r.Stats)
		}
	}
}

// TestReplay replays one run with its trace: PARSLEY_SIM_REPLAY=scenario:seed.
func TestReplay(t *testing.T) {
	v := os.Getenv("PARSLEY_SIM_REPLAY")
	if v == "" {
		t.Skip("set PARSLEY_SIM_REPLAY=scenario:seed to replay a run")
	}
	var name string
	var seed uint64
	for i := len(v) - 1; i >= 0; i-- {
		if v[i] == ':' {
			name = v[:i]
			n, err := strconv.ParseUint(v[i+1:], 10, 64)
			if err != nil {
				t.Fatalf("PARSLEY_SIM_REPLAY=%q: bad seed", v)
			}
			seed = n
			break
		}
	}
	for _, sc := range Scenarios() {
		if sc.Name == name {
			r := RunScenario(context.Background(), sc, seed, Options{Trace: func(s string) { t.Log(s) }})
			for _, x := range r.Violations {
				t.Error(x)
			}
			t.Logf("stats %+v hash %x", r.Stats, r.TraceHash)
			return
		}
	}
	t.Fatalf("no scenario %q", name)
}
