package stage

// Standby tasks (Config.Standbys): other instances keep warm copies of a
// task's store by tailing its changelog, so a task that moves to one of
// them restores only the tail it has not applied.
//
// This file holds their lifecycle on this member: standbyHost, what the
// member tells the balancer and hears from it, and standbys, the jobs the
// session loop runs. The placement algorithm is beside the owner plan
// (balancer.go: planStandbys), the user data that carries it in its own
// file (standbywire.go).
//
// A task store file has one owner at any moment: the session loop stops a
// standby, and closes its store, before it opens the task on that file.

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/parsley-go/parsley/internal/state"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// standbyHost is this member's side of standby placement: what its joins
// report and what its assignments give it. The balancer's callbacks run on
// the client's goroutines; the session loop reads given and writes warm.
type standbyHost struct {
	count   int // Config.Standbys
	log     *slog.Logger
	changed func() // the standby set changed: the session loop reconciles

	mu    sync.Mutex
	warm  []int32 // partition numbers with a standby running here, sorted
	given []int32 // standby partition numbers of the latest assignment, sorted
}

// joinUserData encodes the member's join: its standby count and the
// partition numbers it keeps warm copies of.
func (h *standbyHost) joinUserData() []byte {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return appendJoinUserData(nil, h.count, h.warm)
}

// parseAssignment reads a member's assignment: its topic partitions, and
// in the user data its standby partition numbers.
func (h *standbyHost) parseAssignment(b []byte) (map[string][]int32, error) {
	assigned, err := kgo.ParseConsumerSyncAssignment(b)
	if err != nil || h == nil {
		return assigned, err
	}
	var m kmsg.ConsumerMemberAssignment
	if err := m.ReadFrom(b); err != nil {
		return nil, err
	}
	var given []int32
	switch {
	case len(m.UserData) == 0:
		// The leader runs an earlier release, or nobody asks for standbys.
	case m.UserData[0] != standbyUserDataVersion:
		h.log.Warn("stage: assignment carries standby user data of an unknown version; running no standbys", "version", m.UserData[0])
	default:
		if given, err = readPartitions(m.UserData[1:]); err != nil {
			h.log.Warn("stage: assignment carries unreadable standby user data; running no standbys", "err", err)
			given = nil
		}
	}
	slices.Sort(given)
	h.mu.Lock()
	same := slices.Equal(given, h.given)
	h.given = given
	h.mu.Unlock()
	if !same {
		h.log.Debug("stage: standby partition numbers assigned", "partitions", given)
	}
	if !same && h.changed != nil {
		h.changed()
	}
	return assigned, nil
}

// standbyJob is one standby task: a Tailer on the task's store. Until its
// job is done the job owns the store; the session loop owns the standby.
type standbyJob struct {
	kv  *state.Store
	job job
	err error

	applied, lag atomic.Int64 // the Tailer's last progress; lag -1 until it caught up once
}

// standbys runs this member's standby jobs. The task manager owns it and
// alone calls its methods, on the session loop; host is shared with the
// balancer and has its own lock, and a job's progress is atomics its job
// writes. It is built at Run, once the startup checks have resolved the
// topics.
type standbys struct {
	host  *standbyHost
	jobs  map[taskID]*standbyJob
	retry map[taskID]time.Time // a failed standby starts again after this

	retryAfter time.Duration // how long a failed standby waits before it starts again
	clock      func() time.Time
	log        *slog.Logger
	stages     []*Stage
	topics     map[string]topicMeta
	files      storeFiles
	cluster    cluster
	runner     jobRunner
	// hooks.standbyProgress
	progress func(ctx context.Context, stage string, partition int32, p state.TailProgress)
}

// sync runs a standby for each task of the given partition numbers that
// is not active here (open: the tasks open here; want: the tasks the
// assignment lets this instance run, nil for the open ones), stops the
// others — before their task is opened on the same file — and publishes
// the partition numbers it keeps warm for the next join.
func (sb *standbys) sync(ctx context.Context, want map[taskID]bool, open func(taskID) bool) {
	sb.host.mu.Lock()
	given := slices.Clone(sb.host.given)
	sb.host.mu.Unlock()
	desired := make(map[taskID]bool)
	for _, p := range given {
		for si, st := range sb.stages {
			id := taskID{si, p}
			if p >= sb.topics[st.sources[0].topic].partitions || open(id) || want[id] {
				continue
			}
			desired[id] = true
		}
	}
	for _, id := range slices.SortedFunc(maps.Keys(sb.jobs), compareTaskIDs) {
		if desired[id] {
			continue
		}
		if want[id] {
			j := sb.jobs[id]
			sb.log.Info("stage: standby copy becomes the task's store", "stage", sb.stages[id.stage].name, "partition", id.partition,
				"applied", j.applied.Load(), "lag", j.lag.Load())
		}
		sb.stop(id)
	}
	for id := range sb.retry {
		if !desired[id] {
			delete(sb.retry, id)
		}
	}
	now := sb.clock()
	var ids []taskID
	for id := range desired {
		if sb.jobs[id] == nil && !now.Before(sb.retry[id]) {
			ids = append(ids, id)
		}
	}
	sortTaskIDs(ids)
	for _, id := range ids {
		// A standby that cannot start costs a slower failover, nothing
		// else: the task itself reports the same problem if it comes here.
		if err := sb.start(ctx, id); err != nil {
			sb.log.Warn("stage: standby did not start; retrying", "stage", sb.stages[id.stage].name, "partition", id.partition, "err", err, "after", sb.retryAfter)
			sb.retry[id] = now.Add(sb.retryAfter)
		}
	}
	warm := make([]int32, 0, len(sb.jobs))
	for id := range sb.jobs {
		if !slices.Contains(warm, id.partition) {
			warm = append(warm, id.partition)
		}
	}
	slices.Sort(warm)
	sb.host.mu.Lock()
	sb.host.warm = warm
	sb.host.mu.Unlock()
}

func (sb *standbys) start(ctx context.Context, id taskID) error {
	st := sb.stages[id.stage]
	path := storePath(sb.files.stateDir, sb.files.appID, st.name, id.partition)
	if err := sb.files.moveLegacy(ctx, st, id.partition, path); err != nil {
		return err
	}
	kv, err := state.Open(ctx, path, state.CacheBytes(sb.files.cacheBytes))
	if err != nil {
		return fmt.Errorf("stage %q partition %d: standby: %w", st.name, id.partition, err)
	}
	j := &standbyJob{kv: kv}
	j.applied.Store(kv.Checkpoint())
	j.lag.Store(-1)
	topic := ChangelogTopic(sb.files.appID, st.name)
	tl := &state.Tailer{
		Source: sb.cluster.changelog(topic, id.partition),
		Store:  kv,
		Now:    sb.clock,
		Progress: func(ctx context.Context, p state.TailProgress) {
			j.applied.Store(p.Applied)
			j.lag.Store(p.Lag)
			if sb.progress != nil {
				sb.progress(ctx, st.name, id.partition, p)
			}
		},
	}
	j.job = sb.runner.run(fmt.Sprintf("standby %s/%d", st.name, id.partition), func(ctx context.Context) {
		defer tl.Source.Close()
		_, j.err = tl.Run(ctx)
	})
	sb.jobs[id] = j
	delete(sb.retry, id)
	return nil
}

// stop stops a standby and closes its store: the file is free for the
// task.
func (sb *standbys) stop(id taskID) {
	j := sb.jobs[id]
	if j == nil {
		return
	}
	j.job.stop()
	if err := j.kv.Close(); err != nil {
		sb.log.Warn("stage: close standby store", "stage", sb.stages[id.stage].name, "partition", id.partition, "err", err)
	}
	delete(sb.jobs, id)
}

// stopAll stops every standby (Run returns).
func (sb *standbys) stopAll() {
	for _, id := range slices.SortedFunc(maps.Keys(sb.jobs), compareTaskIDs) {
		sb.stop(id)
	}
}

// tend runs on the session loop at every poll: a standby that stopped on
// an error (a recreated changelog, a log start that passed it, a broker
// error) is closed and started again after retryAfter, which restores it
// the way Restore does (wiping a copy it cannot trust). open is as for
// sync.
func (sb *standbys) tend(ctx context.Context, open func(taskID) bool) {
	failed := false
	now := sb.clock()
	for _, id := range slices.SortedFunc(maps.Keys(sb.jobs), compareTaskIDs) {
		j := sb.jobs[id]
		if !j.job.finished() {
			continue
		}
		sb.log.Warn("stage: standby stopped; restarting it", "stage", sb.stages[id.stage].name, "partition", id.partition, "err", j.err, "after", sb.retryAfter)
		sb.stop(id)
		sb.retry[id] = now.Add(sb.retryAfter)
		failed = true
	}
	due := false
	for _, at := range sb.retry {
		if !now.Before(at) {
			due = true
		}
	}
	if failed || due {
		sb.sync(ctx, nil, open)
	}
}

// standbySnapshot is a standby as readers see it.
type standbySnapshot struct {
	stage     string
	partition int32
	applied   int64
	lag       int64 // -1 until the first catch-up
}

// snapshots returns the standbys as readers see them; none before Run.
func (sb *standbys) snapshots() []standbySnapshot {
	if sb == nil {
		return nil
	}
	var out []standbySnapshot
	for id, j := range sb.jobs {
		out = append(out, standbySnapshot{stage: sb.stages[id.stage].name, partition: id.partition, applied: j.applied.Load(), lag: j.lag.Load()})
	}
	slices.SortFunc(out, func(x, y standbySnapshot) int {
		return cmp.Or(cmp.Compare(x.stage, y.stage), cmp.Compare(x.partition, y.partition))
	})
	return out
}
