package stage

// Sinks outside Kafka: the External interface and how a step waits for
// them before it commits.

import (
	"context"
	"reflect"
	"slices"
	"time"
)

// External is a sink outside Kafka that a stage's handlers write to — a
// NATS JetStream stream, for the bridge. Kafka cannot make such a sink part
// of its transaction, so the runtime makes the step wait for it instead:
// Begin runs when a step starts, the handlers hand the sink their records
// as the step delivers them, and the step's Kafka transaction (consumed
// offsets, protocol state, changelog) commits only after Settle returned
// nil for every external sink of the application. A step whose Settle
// fails is aborted and processed again from committed state after a
// backoff, so the sink sees every record of an aborted step again: it must
// absorb such redeliveries itself (JetStream does, by message ID).
//
// A handler should return an error only for a failure that recurs for the
// same record (it fails the step under Config.OnStepError); a transient
// failure of the sink belongs in Settle, which the runtime retries.
type External interface {
	// Begin starts a step: the sink forgets whatever an earlier, aborted
	// step handed it.
	Begin(ctx context.Context)
	// Settle blocks until everything handed to the sink since Begin is
	// durable there, and returns nil, or returns why not.
	Settle(ctx context.Context) error
}

// IntoExternal declares sinks outside Kafka that the stage's handlers
// write to (see External). A stage with external sinks needs no Kafka sink.
// Declaring the same sink again is a no-op, so helpers that add a source
// together with its sink can be called once per source.
func (b *Builder) IntoExternal(xs ...External) *Builder {
	for _, x := range xs {
		if x == nil || reflect.ValueOf(x).Kind() == reflect.Pointer && reflect.ValueOf(x).IsNil() {
			b.errf("nil external sink")
			continue
		}
		if reflect.TypeOf(x).Comparable() && slices.ContainsFunc(b.externals, func(y External) bool {
			return reflect.TypeOf(y) == reflect.TypeOf(x) && y == x
		}) {
			continue
		}
		b.externals = append(b.externals, x)
	}
	return b
}

// externals are the external sinks of every stage, in stage and
// declaration order, and how many steps in a row they failed to settle.
// Owned by the session loop.
type externals struct {
	sinks  []External
	xfails uint
}

func newExternals(stages []*Stage) externals {
	var xs externals
	for _, s := range stages {
		xs.sinks = append(xs.sinks, s.externals...)
	}
	return xs
}

// begin tells every external sink a step begins.
func (xs *externals) begin(ctx context.Context) {
	for _, x := range xs.sinks {
		x.Begin(ctx)
	}
}

// settle asks every external sink to settle the step's work; the first
// failure is the step's.
func (xs *externals) settle(ctx context.Context) error {
	for _, x := range xs.sinks {
		if err := x.Settle(ctx); err != nil {
			return err
		}
	}
	return nil
}

// settled forgets the failures after a committed step.
func (xs *externals) settled() { xs.xfails = 0 }

// backoff returns the wait before a step that did not settle is retried:
// base, doubled for each failure in a row up to five.
func (xs *externals) backoff(base time.Duration) time.Duration {
	n := min(xs.xfails, 5)
	xs.xfails++
	return base << n
}
