package stage

// The step: one transaction that feeds fetched records, runs user logic,
// sends stamped emissions and the changelog, and commits or aborts.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// step runs one transaction: rebuild the nodes that need it, feed the
// fetched records, run user logic, send stamped emissions and the
// changelog, and end the transaction. After a commit the stores are
// written; otherwise every task's node is rebuilt from committed state and
// the client rewinds to the committed offsets.
func (a *App) step(ctx context.Context, sess *kgo.GroupTransactSession, fs kgo.Fetches) error {
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
	a.pmu.Lock()
	a.prodErr = nil
	a.pmu.Unlock()
	a.beginExternal(sctx)

	a.mu.Lock()
	stepErr := a.runStep(sctx, sess, fs)
	a.mu.Unlock()

	ferr := sess.Client().Flush(sctx)
	a.pmu.Lock()
	perr := a.prodErr
	a.pmu.Unlock()
	commit := stepErr == nil && ferr == nil && perr == nil
	var xerr error
	if commit {
		xerr = a.settleExternal(sctx)
		commit = xerr == nil
	}
	if commit && a.hooks.beforeEnd != nil && a.hooks.beforeEnd(a.steps.Load()) {
		commit = false
	}
	var endErr error
	committed, endErr = sess.End(sctx, kgo.TransactionEndTry(commit))

	a.mu.Lock()
	defer a.mu.Unlock()
	if committed && endErr == nil {
		for _, t := range a.tasks {
			if err := t.commit(sctx, began); err != nil {
				return &fatal{err}
			}
			t.opsCommitted()
		}
		a.steps.Add(1)
		a.xfails = 0
		a.scope.commitStep()
		if a.hooks.afterCommit != nil {
			a.hooks.afterCommit()
		}
		return nil
	}
	for _, t := range a.tasks {
		t.reset()
	}
	a.scope.abortStep()
	if a.hooks.afterAbort != nil {
		a.hooks.afterAbort()
	}
	if endErr != nil {
		return fmt.Errorf("stage: end transaction: %w", endErr)
	}
	if perr != nil || ferr != nil {
		return fmt.Errorf("stage: produce: %w", errors.Join(perr, ferr))
	}
	if stepErr != nil {
		if f := (*fatal)(nil); errors.As(stepErr, &f) {
			return f
		}
		var se *StepError
		if !errors.As(stepErr, &se) {
			// A host failure (a broker answer, an assignment not seen
			// yet): retry from committed state with the same client.
			a.log.Warn("stage: step aborted; retrying", "err", stepErr)
			return sleep(ctx, a.cfg.RetryBackoff)
		}
		if a.cfg.OnStepError == StopOnError {
			return &fatal{stepErr}
		}
		a.log.Error("stage: step failed; retrying from committed state", "err", stepErr)
		return sleep(ctx, a.cfg.RetryBackoff)
	}
	if xerr != nil {
		d := a.externalBackoff()
		a.log.Warn("stage: external sink did not settle; retrying the step from committed state", "err", xerr, "backoff", d)
		return sleep(ctx, d)
	}
	return nil // aborted by a rebalance or a hook: reprocess
}

func (a *App) stepTimeout() time.Duration {
	if a.cfg.TransactionTimeout > 0 {
		return 2 * a.cfg.TransactionTimeout
	}
	return time.Minute
}

func (a *App) promise(_ *kgo.Record, err error) {
	if err != nil {
		a.pmu.Lock()
		if a.prodErr == nil {
			a.prodErr = err
		}
		a.pmu.Unlock()
	}
}

// runStep does the work of a step inside the transaction. a.mu is held.
func (a *App) runStep(ctx context.Context, sess *kgo.GroupTransactSession, fs kgo.Fetches) error {
	ids := make([]taskID, 0, len(a.tasks))
	for id := range a.tasks {
		ids = append(ids, id)
	}
	slices.SortFunc(ids, func(x, y taskID) int {
		if x.stage != y.stage {
			return x.stage - y.stage
		}
		return int(x.partition - y.partition)
	})
	var starts map[string]map[int32]int64
	for _, id := range ids {
		t := a.tasks[id]
		if t.node != nil {
			t.sweepIfDue(ctx) // before feeding, so the step's stamps are swept
			continue
		}
		if starts == nil {
			need := make(map[string][]int32)
			for _, id := range ids {
				if a.tasks[id].node == nil {
					for _, b := range a.tasks[id].st.sources {
						need[b.topic] = append(need[b.topic], id.partition)
					}
					if tk := a.ops.tickTopic[id.stage]; tk != "" {
						need[tk] = append(need[tk], id.partition) // ticks.go
					}
				}
			}
			var err error
			if starts, err = a.startPositions(ctx, need); err != nil {
				return err
			}
		}
		if err := t.build(ctx, sess, starts); err != nil {
			return err
		}
	}
	for _, f := range fs {
		for _, ft := range f.Topics {
			for _, fp := range ft.Partitions {
				if len(fp.Records) == 0 {
					continue
				}
				for _, si := range a.bySource[ft.Topic] {
					t := a.tasks[taskID{si, fp.Partition}]
					if t == nil || t.node == nil {
						// Fetched before the assignment reached us: abort
						// rather than commit its offset unprocessed.
						return fmt.Errorf("stage: records of %s[%d] without a task", ft.Topic, fp.Partition)
					}
					if err := t.feed(ctx, sess, ft.Topic, fp.Records); err != nil {
						return err
					}
				}
			}
		}
	}
	for _, id := range ids {
		if err := a.tasks[id].inStep(ctx, sess); err != nil {
			return err
		}
		if err := a.tasks[id].flush(ctx, sess); err != nil {
			return err
		}
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
