package stage_test

import (
	"fmt"
	"net/http"
	"time"

	"github.com/parsley-go/parsley/protocol"
	"github.com/parsley-go/parsley/stage"
	"github.com/prometheus/client_golang/prometheus"
)

// Tick logic is a pure function of the tick state and the tick: test it
// with plain equality. Here a stage emits a cut marker every third tick.
func ExampleTicksFold() {
	audits := stage.NewTopic("audits", stage.String(), stage.String())
	var policy stage.TickFold[int64] = func(quiet int64, t stage.Tick) (stage.Step[int64], error) {
		if quiet+1 >= 3 {
			return stage.Next(int64(0), audits.Send("cut", fmt.Sprint(t.Time.UnixMilli()))), nil
		}
		return stage.Next(quiet + 1), nil
	}
	for _, quiet := range []int64{0, 2} {
		st, _ := policy(quiet, stage.Tick{Time: time.UnixMilli(60000)})
		fmt.Println(st.State, len(st.Emissions))
	}

	orders := stage.NewTopic("orders", stage.String(), stage.Int64())
	b := stage.WithState(stage.Named("balances"), stage.Int64(), 0)
	stage.OnFold(b, orders, func(n int64, m stage.Message[string, int64]) (stage.Step[int64], error) {
		return stage.Keep[int64](), nil
	})
	st := stage.TicksFold(b, time.Minute, policy).Into(audits).MustBuild()
	fmt.Println(st.TickInterval(), stage.TickTopic("payments", st.Name()))
	// Output:
	// 1 0
	// 0 1
	// 1m0s payments-balances-ticks
}

// A held record renders on one line, as the hold warning logs it.
func ExampleHeldRecord_Summary() {
	h := stage.HeldRecord{
		Stage: "reconciler", Partition: 3, Topic: "views", Offset: 8814, HeldFor: 47 * time.Second, Depth: 219,
		Diagnosis: protocol.NotFetched,
		Waiting:   []stage.Cause{{Claim: protocol.Claim{Diagnosis: protocol.NotFetched, Offset: 51204, Frontier: 51199, Position: 51200}, Topic: "commands"}},
	}
	h.Coordinate.Partition = 3
	h.Waiting[0].Channel.Partition = 3
	fmt.Println(h.Summary())
	// Output: stage "reconciler" task 3 has held views:3@8814 for 47000ms (queue depth 219): vc-hold-not-fetched waiting on commands:3 offset 51204 (local frontier 51199, position 51200) — the cause has not reached this consumer yet; check lag and the producer on that topic
}

// Register the application's collector with the registry you serve, and
// mount its health endpoints.
func ExampleApp_Collector() {
	in := stage.NewTopic("in", stage.String(), stage.String())
	out := stage.NewTopic("out", stage.String(), stage.String())
	st := stage.On(stage.Named("copy"), in, func(m stage.Message[string, string]) ([]stage.Emission, error) {
		return []stage.Emission{out.Send(m.Key, m.Value)}, nil
	}).Into(out).MustBuild()
	app, err := stage.New(stage.Config{ApplicationID: "shop", InstanceID: "i1", Brokers: []string{"localhost:9092"}, StateDir: "/var/lib/shop"}, st)
	if err != nil {
		panic(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(app.Collector())
	mux := http.NewServeMux()
	mux.Handle("/livez", app.HealthHandler())
	mux.Handle("/readyz", app.HealthHandler())
	fams, _ := reg.Gather()
	for _, f := range fams {
		fmt.Println(f.GetName())
	}
	// Before Run, only the instance's step series exist; task series
	// appear with the tasks.

	// Output:
	// parsley_step_aborts_total
	// parsley_step_commits_total
	// parsley_step_duration_seconds
}
