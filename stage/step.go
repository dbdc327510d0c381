package stage

// The step: one transaction that feeds fetched records, runs user logic,
// sends stamped emissions and the changelog, and commits or aborts.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/parsley-go/parsley/internal/kclient"
	"github.com/twmb/franz-go/pkg/kgo"
)

// stepState is what the steps need beside the tasks: the open step's
// produce results, the decode workers, and how many steps in a row failed
// alike. Owned by the session loop, except sent, which franz-go's produce
// promises write under its own lock (sendResults, env.go).
type stepState struct {
	sent            sendResults // the open step's produce results (env.go)
	ahead           decodeAhead // the step's decoding workers (decodeahead.go)
	external        externals   // the stages' external sinks (external.go)
	tasklessRetries int         // consecutive steps retried at once after a tasklessFetchError
}

// step runs one transaction: rebuild the nodes that need it, feed the
// fetched records, run user logic, send stamped emissions and the
// changelog, and end the transaction. After a commit the stores are
// written; otherwise every task's node is rebuilt from committed state and
// the client rewinds to the committed offsets. What follows an abort is
// decided by classifyStep (outcome.go).
func (a *App) step(ctx context.Context, sess groupSession, fs kgo.Fetches, moved bool) error {
	committed := false
	defer func(start time.Time) { a.stepEnded(start, committed) }(time.Now())
	// Taken before the step writes anything: no changelog record past the
	// checkpoints this step commits was written before it.
	began := a.cfg.WallClock()
	// The step runs to its end even if ctx ends meanwhile: a half-done
	// step is aborted, never committed.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.stepTimeout())
	defer cancel()
	if err := sess.Begin(); err != nil {
		return fmt.Errorf("stage: begin transaction: %w", err)
	}
	a.steps.sent.reset()
	a.steps.external.begin(sctx)

	work := errMovedDuringStep
	if !moved {
		work = a.runStep(sctx, sess, fs)
	}
	end := stepEnd{step: a.positions.explainOutOfOrder(sctx, work)}
	end.flush = sess.Flush(sctx)
	end.produce = a.steps.sent.firstErr()
	commit := end.step == nil && end.flush == nil && end.produce == nil
	if commit {
		end.external = a.steps.external.settle(sctx)
		commit = end.external == nil
	}
	if commit && !a.tm.heldAsOpened() {
		// The group moved a task of the step while it ran, and the loop
		// has not reconciled yet: the task's writes (a build's state, a
		// tick) may land after its new owner restored, so the step does
		// not commit them.
		end.step, commit = errMovedDuringStep, false
	}
	if commit && a.hooks.beforeEnd != nil && a.hooks.beforeEnd(a.status.committed.Load()) {
		commit = false
	}
	// An empty step ends as an abort; a commit that consumed nothing is
	// anchored (txnend.go).
	empty := commit && fs.NumRecords() == 0 && a.steps.sent.produced == 0
	committed, end.end = a.txn.end(sctx, sess, commit, empty, a.tm.inStep)
	if empty && committed {
		// The abort rewound the client to the group's offsets: set back
		// again what this session rewound further and has not consumed
		// yet (positions.go).
		a.positions.rewind(sess, nil)
	}
	failoverAbort := !committed && offsetCommitAborted(end.end)
	if failoverAbort {
		a.log.Warn("stage: step aborted: its offsets could not be committed while the group coordinator failed over; retrying from committed state on the same client", "err", end.end)
		end.end = nil // the abort was acknowledged: an abort like any other
	}
	end.committed = committed
	if !committed && end.end == nil {
		// End rewound the client to the committed offsets; a stage that
		// has not consumed that far needs it further back (positions.go).
		rw := (*rewindError)(nil)
		errors.As(end.step, &rw)
		a.positions.rewind(sess, rw)
		if rw != nil {
			a.tm.resetAll()
			return nil
		}
	}

	out := classifyStep(end, a.cfg.OnStepError)
	if out.verdict == stepCommitted {
		if !empty {
			a.positions.committed() // the commit included them
		}
		if err := a.tm.commitStep(sctx, began); err != nil {
			return err
		}
		a.status.committed.Add(1)
		a.steps.external.settled()
		a.steps.tasklessRetries = 0
		a.scope.commitStep()
		if a.hooks.afterCommit != nil {
			a.hooks.afterCommit()
		}
		return nil
	}
	a.tm.resetAll()
	a.scope.abortStep()
	if a.hooks.afterAbort != nil {
		a.hooks.afterAbort()
	}
	switch out.verdict {
	case stepRetryHost:
		taskless := (*tasklessFetchError)(nil)
		if (errors.As(out.err, &taskless) || errors.Is(out.err, errMovedDuringStep)) && a.steps.tasklessRetries < maxTasklessRetries {
			// The abort rewound the client, and reconcile has paused the
			// partition, built its task, or taken in the move: the retry
			// will not meet these records again, so it need not wait.
			a.steps.tasklessRetries++
			a.log.Debug("stage: step aborted for records fetched across an assignment change; retrying at once", "err", out.err)
			return nil
		}
		a.log.Warn("stage: step aborted; retrying", "err", out.err)
		return a.sleep(ctx, a.cfg.RetryBackoff)
	case stepRetryFailed:
		a.log.Error("stage: step failed; retrying from committed state", "err", out.err)
		return a.sleep(ctx, a.cfg.RetryBackoff)
	case stepRetryExternal:
		d := a.steps.external.backoff(a.cfg.RetryBackoff)
		a.log.Warn("stage: external sink did not settle; retrying the step from committed state", "err", out.err, "backoff", d)
		return a.sleep(ctx, d)
	}
	if failoverAbort {
		// The next step's offset commit retries the coordinator itself;
		// this only keeps a coordinator that fails every request at once
		// from being asked in a loop.
		return a.sleep(ctx, kclient.MaxBackoff)
	}
	return out.err // nil to reprocess at once; the error to rejoin or stop
}

// stepTimeout is twice the transaction timeout (Config.TransactionTimeout).
func (a *App) stepTimeout() time.Duration { return 2 * a.cfg.TransactionTimeout }

// runStep does the work of a step inside the transaction.
func (a *App) runStep(ctx context.Context, sess groupSession, fs kgo.Fetches) error {
	ts := a.tm.inStep()
	var starts, logStarts map[string]map[int32]int64
	var back *rewindError
	for _, t := range ts {
		if t.node != nil {
			t.sweepIfDue(ctx) // before feeding, so the step's stamps are swept
			continue
		}
		if starts == nil {
			var err error
			if starts, logStarts, err = a.positions.starts(ctx, a.tm.sourcesOf(ts)); err != nil {
				return err
			}
		}
		if err := t.build(ctx, sess, starts, logStarts); err != nil {
			if rw := (*rewindError)(nil); errors.As(err, &rw) {
				back = back.merge(rw) // build the other tasks: one rewind for all
				continue
			}
			return err
		}
	}
	if back != nil {
		return back
	}
	if err := a.feedAll(ctx, sess, fs); err != nil {
		return err
	}
	for _, t := range ts {
		if err := t.tickIfDue(ctx, sess); err != nil {
			return err
		}
	}
	// One wait for every task's sends: a task's changelog records name its
	// sends' offsets, so they wait for the acknowledgements, but not for
	// another task's changelog (tasksends.go).
	if err := awaitSends(ctx, sess, ts); err != nil {
		return err
	}
	for _, t := range ts {
		if err := t.flush(ctx, sess); err != nil {
			return err
		}
	}
	return nil
}

// feedAll feeds the step's fetched records to their tasks, with their
// decoding started ahead on the decode workers (decodeahead.go).
func (a *App) feedAll(ctx context.Context, p producer, fs kgo.Fetches) error {
	if a.steps.ahead.workers > 0 {
		for _, f := range fs {
			for _, ft := range f.Topics {
				for _, fp := range ft.Partitions {
					for _, si := range a.topo.bySource[ft.Topic] {
						if t := a.tm.running(si, fp.Partition); t != nil {
							a.steps.ahead.add(t.aheadFor(ft.Topic), fp.Records)
						}
					}
				}
			}
		}
		a.steps.ahead.start()
		defer a.steps.ahead.finish()
	}
	for _, f := range fs {
		for _, ft := range f.Topics {
			for _, fp := range ft.Partitions {
				if len(fp.Records) == 0 {
					continue
				}
				for _, si := range a.topo.bySource[ft.Topic] {
					t := a.tm.running(si, fp.Partition)
					if t == nil {
						// Fetched before the assignment reached us, or
						// before the task's restore paused its partition:
						// abort rather than commit its offset unprocessed.
						return &tasklessFetchError{ft.Topic, fp.Partition}
					}
					if err := t.feed(ctx, p, ft.Topic, fp.Records); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// tasklessFetchError aborts a step that polled records of a partition whose
// task is not running yet: committing the step would commit their offset
// unprocessed.
type tasklessFetchError struct {
	topic     string
	partition int32
}

func (e *tasklessFetchError) Error() string {
	return fmt.Sprintf("stage: records of %s[%d] without a task", e.topic, e.partition)
}

// errMovedDuringStep aborts a step during whose polls the group changed
// what this member holds (fillStep): the client may have fetched a
// partition again from its committed offset, so the step could hold some
// of its records twice, and its tasks may no longer be this member's. No
// record of it is fed; End rewinds them all, and the next step runs once
// the loop has reconciled.
var errMovedDuringStep = errors.New("stage: the assignment changed during the step's polls")

// maxTasklessRetries bounds the steps in a row that retry at once after a
// tasklessFetchError or errMovedDuringStep; past it, a retry waits RetryBackoff like any other
// host failure, so a cause not foreseen here cannot spin the loop.
const maxTasklessRetries = 3
