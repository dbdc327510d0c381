package sim_test

import (
	"context"
	"fmt"

	"github.com/parsley-go/parsley/sim"
)

// Run the scenario suite against the real protocol, and show that the
// oracle flags a protocol that ignores claims.
func Example() {
	ctx := context.Background()
	clean, flagged := 0, 0
	for _, sc := range sim.Scenarios() {
		for seed := uint64(1); seed <= 5; seed++ {
			if r := sim.RunScenario(ctx, sc, seed, sim.Options{}); !r.Failed() {
				clean++
			}
			if r := sim.RunScenario(ctx, sc, seed, sim.Options{NewProtocol: sim.EagerProtocol}); r.Failed() {
				flagged++
			}
		}
	}
	fmt.Println("real protocol clean:", clean == 5*len(sim.Scenarios()))
	fmt.Println("eager protocol flagged:", flagged > 0)
	// Output:
	// real protocol clean: true
	// eager protocol flagged: true
}
