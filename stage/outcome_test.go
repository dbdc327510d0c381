package stage

import (
	"errors"
	"testing"
)

func TestClassifyStep(t *testing.T) {
	var (
		endErr      = errors.New("end failed")
		produceErr  = errors.New("produce failed")
		flushErr    = errors.New("flush failed")
		hostErr     = errors.New("broker said no")
		externalErr = errors.New("sink did not settle")
		stepErr     = &StepError{Stage: "s", Topic: "in", Partition: 1, Offset: 7, Err: errors.New("handler failed")}
		fatalErr    = &fatal{errors.New("store unreadable")}
	)
	tests := []struct {
		name    string
		end     stepEnd
		policy  ErrorPolicy
		verdict stepVerdict
		is      error // the outcome's error wraps this; nil: no error
		fatal   bool  // the outcome's error is a *fatal
	}{
		{name: "committed", end: stepEnd{committed: true}, verdict: stepCommitted},
		{name: "aborted by a rebalance", end: stepEnd{}, verdict: stepReprocess},
		{name: "committed but End failed", end: stepEnd{committed: true, end: endErr}, verdict: stepRejoin, is: endErr},
		{name: "End failed beats everything", end: stepEnd{end: endErr, produce: produceErr, step: stepErr, external: externalErr}, verdict: stepRejoin, is: endErr},
		{name: "produce failed", end: stepEnd{produce: produceErr}, verdict: stepRejoin, is: produceErr},
		{name: "flush failed", end: stepEnd{flush: flushErr}, verdict: stepRejoin, is: flushErr},
		{name: "produce beats the step", end: stepEnd{produce: produceErr, flush: flushErr, step: stepErr}, verdict: stepRejoin, is: flushErr},
		{name: "fatal stops", end: stepEnd{step: fatalErr}, policy: RetryOnError, verdict: stepStop, is: fatalErr.err, fatal: true},
		{name: "host failure retries", end: stepEnd{step: hostErr}, verdict: stepRetryHost, is: hostErr},
		{name: "step error stops under StopOnError", end: stepEnd{step: stepErr}, policy: StopOnError, verdict: stepStop, is: stepErr, fatal: true},
		{name: "step error retries under RetryOnError", end: stepEnd{step: stepErr}, policy: RetryOnError, verdict: stepRetryFailed, is: stepErr},
		{name: "step beats external", end: stepEnd{step: hostErr, external: externalErr}, verdict: stepRetryHost, is: hostErr},
		{name: "external backs off", end: stepEnd{external: externalErr}, verdict: stepRetryExternal, is: externalErr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := classifyStep(tt.end, tt.policy)
			if got.verdict != tt.verdict {
				t.Errorf("verdict %d, want %d", got.verdict, tt.verdict)
			}
			if tt.is == nil {
				if got.err != nil {
					t.Errorf("err %v, want none", got.err)
				}
				return
			}
			if !errors.Is(got.err, tt.is) {
				t.Errorf("err %v, want it to wrap %v", got.err, tt.is)
			}
			var f *fatal
			if isFatal := errors.As(got.err, &f); isFatal != tt.fatal {
				t.Errorf("err %v is fatal: %v, want %v", got.err, isFatal, tt.fatal)
			}
		})
	}
}
