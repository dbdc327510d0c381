package stagetest_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/parsley-go/parsley/stage"
	"github.com/parsley-go/parsley/stage/stagetest"
)

var (
	orders = stage.NewTopic("orders", stage.String(), stage.Int64())
	totals = stage.NewTopic("totals", stage.String(), stage.String())
)

// totalsStage sums order amounts per customer, and every minute emits how
// many ticks it has seen, from its tick state.
func totalsStage() *stage.Stage {
	b := stage.WithState(stage.Named("totals"), stage.JSON[int64](), 0)
	stage.OnFold(b, orders, func(sum int64, m stage.Message[string, int64]) (stage.Step[int64], error) {
		return stage.Next(sum+m.Value, totals.Send(m.Key, fmt.Sprint(sum+m.Value))), nil
	})
	stage.TicksFold(b, time.Minute, func(n int64, tk stage.Tick) (stage.Step[int64], error) {
		return stage.Next(n+1, totals.Send("tick", fmt.Sprintf("%d@%s", n+1, tk.Time.UTC().Format(time.TimeOnly)))), nil
	})
	return b.Into(totals).MustBuild()
}

func values[K, V any](os []stagetest.Output[K, V]) []V {
	var out []V
	for _, o := range os {
		out = append(out, o.Value)
	}
	return out
}

// TestDriverPipesTicksAndRestarts: typed records go in and decoded outputs
// come out; ticks fire only when the driver's clock crosses an interval,
// with that clock's timestamps; state (per key and the tick slot) survives
// a restart.
func TestDriverPipesTicksAndRestarts(t *testing.T) {
	d := stagetest.New(t, []*stage.Stage{totalsStage()}, stagetest.StartTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)))
	stagetest.Send(d, orders, "ann", 5)
	stagetest.Send(d, orders, "ann", 7)
	if got := values(stagetest.Read(d, totals, 2)); !slices.Equal(got, []string{"5", "12"}) {
		t.Fatalf("totals %q", got)
	}
	d.AdvanceWallClock(30 * time.Second)
	if got := stagetest.ReadAvailable(d, totals, 300*time.Millisecond); len(got) != 0 {
		t.Fatalf("emitted %v before the interval passed", values(got))
	}
	d.AdvanceWallClock(30 * time.Second)
	d.AdvanceWallClock(time.Minute)
	if got := values(stagetest.Read(d, totals, 2)); !slices.Equal(got, []string{"1@12:01:00", "2@12:02:00"}) {
		t.Fatalf("ticks %q", got)
	}
	d.Restart()
	stagetest.Send(d, orders, "ann", 1)
	// The total is read before the clock moves: a tick due at the same
	// moment may run in the step before or after the order's, and both
	// write to totals, so their order on the topic is not the stage's to
	// promise.
	if got := values(stagetest.Read(d, totals, 1)); !slices.Equal(got, []string{"13"}) {
		t.Fatalf("after restart %q", got)
	}
	d.AdvanceWallClock(time.Minute)
	if got := values(stagetest.Read(d, totals, 1)); !slices.Equal(got, []string{"3@12:03:00"}) {
		t.Fatalf("tick after restart %q", got)
	}
	if err := d.Err(); err != nil {
		t.Fatal(err)
	}
}
