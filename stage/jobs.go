package stage

import "context"

// A job is work the session loop runs beside itself — a task's restore, a
// standby's tail — and owns: it starts the job, asks whether it is done,
// and stops it. The job owns what it was given (a task's store) until it
// is done.
type job interface {
	// finished reports, without waiting, whether the job's work returned.
	finished() bool
	// stop cancels the job's context and waits for its work to return.
	stop()
}

// jobRunner starts jobs. goJobs runs each on a goroutine of its own; the
// host simulator runs each as one of its actors, so that which runs when
// is its choice (hostsim_test.go).
type jobRunner interface {
	run(name string, work func(ctx context.Context)) job
}

// goJobs runs each job on a goroutine, which ends when the work returns.
type goJobs struct{}

type goJob struct {
	cancel context.CancelFunc
	done   chan struct{}
}

func (goJobs) run(_ string, work func(ctx context.Context)) job {
	ctx, cancel := context.WithCancel(context.Background())
	j := &goJob{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(j.done)
		work(ctx)
	}()
	return j
}

func (j *goJob) finished() bool {
	select {
	case <-j.done:
		return true
	default:
		return false
	}
}

func (j *goJob) stop() {
	j.cancel()
	<-j.done
}
