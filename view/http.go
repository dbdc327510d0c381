package view

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// TokenHeader is the request header that carries a token's text form.
const TokenHeader = "Parsley-Token"

// HandlerOptions configure Handler.
type HandlerOptions[K any] struct {
	// ParseKey turns the last path element into a key (required unless K
	// is string).
	ParseKey func(string) (K, error)
	// MaxWait bounds how long a read with a token waits for the owning
	// task (default 10 seconds); the request's own context ends it too.
	MaxWait time.Duration
}

// RetryAfter is the Retry-After the Handler sends with a 503: a view
// catches up, or its Run restarts, in about that many seconds.
const RetryAfter = "1"

// Handler returns an HTTP handler for key lookups:
//
//   - GET /state/{key} answers 200 with the key's state as JSON
//     (encoding/json of the value the stage's state codec decodes), 404
//     when the key has no state, 400 for a key ParseKey refuses, 421 for a
//     key of a partition the view does not replicate (ErrNotReplicated),
//     and 503 with Retry-After while the key's partition is not ready
//     (a *NotReadyError), the view is closed, or — for a token read —
//     its Run is not running. With a Parsley-Token header the read is
//     GetAfter's: 400 for a token that does not parse, 504 with what it
//     still waits for when MaxWait or the request ends first.
//   - /livez answers 200 while Run runs; /readyz 200 once the view caught
//     up, 503 with the lagging partitions otherwise, like the stage's
//     health handler; /metrics serves Collector in the Prometheus format.
func Handler[K, S any](v *View[K, S], o HandlerOptions[K]) (http.Handler, error) {
	parse := o.ParseKey
	if parse == nil {
		var zero K
		if _, ok := any(zero).(string); !ok {
			return nil, errors.New("view: Handler needs HandlerOptions.ParseKey for a key type other than string")
		}
		parse = func(s string) (K, error) { return any(s).(K), nil }
	}
	wait := o.MaxWait
	if wait <= 0 {
		wait = 10 * time.Second
	}
	reg := prometheus.NewRegistry()
	if err := reg.Register(v.Collector()); err != nil {
		return nil, fmt.Errorf("view: register metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /state/{key}", func(w http.ResponseWriter, r *http.Request) {
		key, err := parse(r.PathValue("key"))
		if err != nil {
			http.Error(w, fmt.Sprintf("bad key %q: %v", r.PathValue("key"), err), http.StatusBadRequest)
			return
		}
		var (
			s  S
			ok bool
		)
		if text := r.Header.Get(TokenHeader); text != "" {
			tok, perr := ParseToken(text)
			if perr != nil {
				http.Error(w, perr.Error(), http.StatusBadRequest)
				return
			}
			ctx, cancel := context.WithTimeout(r.Context(), wait)
			s, ok, err = v.GetAfter(ctx, tok, key)
			cancel()
		} else {
			s, ok, err = v.Get(key)
		}
		if err != nil {
			code := http.StatusInternalServerError
			switch {
			case errors.Is(err, ErrNotRunning), errors.Is(err, ErrNotReady), errors.Is(err, ErrClosed):
				code = http.StatusServiceUnavailable
				w.Header().Set("Retry-After", RetryAfter)
			case errors.Is(err, ErrNotYet):
				code = http.StatusGatewayTimeout
			case errors.Is(err, ErrNotReplicated):
				code = http.StatusMisdirectedRequest
			}
			http.Error(w, err.Error(), code)
			return
		}
		if !ok {
			http.Error(w, "no state", http.StatusNotFound)
			return
		}
		b, err := json.Marshal(s)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(b, '\n'))
	})
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		if !v.isRunning() {
			http.Error(w, "not running", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ok, why := v.Readiness(); !ok {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux, nil
}

func (v *View[K, S]) isRunning() bool {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.running
}

// Readiness reports whether the view is ready (see Ready) and, if not,
// why: the partitions still catching up.
func (v *View[K, S]) Readiness() (bool, string) {
	if !v.isRunning() {
		return false, "not running"
	}
	var behind []string
	for _, s := range v.Status() {
		if !s.Ready {
			behind = append(behind, fmt.Sprintf("%s[%d] catching up (lag %d)", v.topic, s.Partition, s.Lag))
		}
	}
	if len(behind) > 0 {
		return false, strings.Join(behind, "; ")
	}
	return true, ""
}
