package stage

// How a step's end is classified: a pure function from what the step saw
// to what the loop does next.

import (
	"errors"
	"fmt"
)

// stepEnd is everything a step's outcome depends on.
type stepEnd struct {
	committed bool  // sess.End committed the transaction
	end       error // sess.End's error
	produce   error // the first failed produce promise
	flush     error // flushing the producer
	step      error // the step's work: building nodes, feeding, user logic, sends
	external  error // an external sink's Settle
}

// stepVerdict is what the loop does after a step.
type stepVerdict int

const (
	// stepCommitted: write the stores and go on.
	stepCommitted stepVerdict = iota
	// stepReprocess: aborted by a rebalance or a test hook; process the
	// same records again at once.
	stepReprocess
	// stepRejoin: the client is unusable (the transaction could not end, a
	// produce failed); the loop returns the error and Run builds a new
	// client.
	stepRejoin
	// stepStop: Run returns the error.
	stepStop
	// stepRetryHost: a host failure (a broker answer, an assignment not
	// seen yet); retry from committed state with the same client after
	// RetryBackoff.
	stepRetryHost
	// stepRetryFailed: a *StepError under RetryOnError; retry after
	// RetryBackoff.
	stepRetryFailed
	// stepRetryExternal: an external sink did not settle; retry after the
	// growing external backoff.
	stepRetryExternal
)

// stepOutcome is a verdict and its error: what the loop returns (rejoin,
// stop) or logs (retries).
type stepOutcome struct {
	verdict stepVerdict
	err     error
}

// classifyStep decides a step's outcome. The first matching cause wins:
// ending the transaction, then producing, then the step's own failure, then
// the external sinks. A fatal error stops Run, and so does a *StepError
// under StopOnError; any other step failure is retried.
func classifyStep(e stepEnd, policy ErrorPolicy) stepOutcome {
	switch {
	case e.committed && e.end == nil:
		return stepOutcome{verdict: stepCommitted}
	case e.end != nil:
		return stepOutcome{stepRejoin, fmt.Errorf("stage: end transaction: %w", e.end)}
	case e.produce != nil || e.flush != nil:
		return stepOutcome{stepRejoin, fmt.Errorf("stage: produce: %w", errors.Join(e.produce, e.flush))}
	case e.step != nil:
		if f := (*fatal)(nil); errors.As(e.step, &f) {
			return stepOutcome{stepStop, f}
		}
		if se := (*StepError)(nil); !errors.As(e.step, &se) {
			return stepOutcome{stepRetryHost, e.step}
		}
		if policy == StopOnError {
			return stepOutcome{stepStop, &fatal{e.step}}
		}
		return stepOutcome{stepRetryFailed, e.step}
	case e.external != nil:
		return stepOutcome{stepRetryExternal, e.external}
	}
	return stepOutcome{verdict: stepReprocess}
}
