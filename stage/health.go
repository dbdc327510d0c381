package stage

// Liveness and readiness: the health handler and what it answers from.

import (
	"fmt"
	"net/http"
	"time"
)

// HealthHandler returns an HTTP handler with two endpoints:
//
//   - /livez answers 200 while Run is running and its loop makes progress,
//     503 before Run, after it returned, or when the loop has shown no sign
//     of life for longer than a step may take.
//   - /readyz answers 200 once the instance has joined its group and every
//     assigned task has restored its store and built its causal node (it is
//     processing), 503 otherwise, with the reason in the body: each task
//     not ready yet is named ("task s/1 restoring"). An instance that
//     rejoins after a client failure is not ready until it is again.
//
// Mount it where your orchestrator probes, e.g.
// http.Handle("/", app.HealthHandler()).
func (a *App) HealthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := a.Live(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := a.Readiness(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	return mux
}

// Live reports whether Run is running and its loop made progress recently,
// and if not, why.
func (a *App) Live() (bool, string) {
	switch {
	case !a.status.started.Load():
		return false, "not started"
	case a.status.stopped.Load():
		return false, "stopped"
	}
	// A step may take up to its timeout; between sessions the loop waits
	// RetryBackoff. Allow both, and a few poll intervals.
	limit := a.stepTimeout() + a.cfg.RetryBackoff + 10*a.cfg.PollInterval
	if beat := a.status.beat.Load(); beat != 0 && time.Since(time.Unix(0, beat)) > limit {
		return false, fmt.Sprintf("no progress for over %v", limit)
	}
	return true, ""
}

// Readiness reports whether the instance is ready: joined, and every
// assigned task restored and processing. If not, it says why.
func (a *App) Readiness() (bool, string) {
	if ok, why := a.Live(); !ok {
		return false, why
	}
	snap := a.status.snap.Load()
	if snap == nil {
		return false, "not started"
	}
	return snap.ready, snap.why
}
